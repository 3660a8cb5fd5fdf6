"""How a search spends its budget (search/rules.py): a run with --minutes spends them unless its
space is covered, and then ends early saying so; a screen far ahead of the best is measured in full
at once even where it loses a shape; a small space is enumerated nearest-the-fastest first; and
stagnation counts only measurements that could have changed the best."""

from __future__ import annotations

import math
import re
import time

import model_referee
import pytest
from test_search_launch_twins import _clamp_target, _LaunchReferee, _Recorder
from test_search_loop import _run, fake_gpu  # noqa: F401 - fake_gpu is a fixture
from test_search_nearby import _launched, _steps

from kernelsmith.commands.run import optimize
from kernelsmith.onboard.task import load_task
from kernelsmith.search.archive import Archive
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.mutators.params import ParamsMutator
from kernelsmith.search.run_config import SearchConfig, SearchHooks

EVAL_S = 0.3  # what every candidate's evaluation takes (the referee's own seconds, slept)


def _scale_shape(s: dict, factor: float) -> None:
    """A shape entry of the model referee with its speedup (and times, CI, samples) multiplied by `factor`."""
    s["speedup"] *= factor
    s["candidate_ms"] /= factor
    s["device_ms"] /= factor
    s["ci95"] = [x * factor for x in s["ci95"]]
    s["samples_ms"] = {**s["samples_ms"], "candidate": [x / factor for x in s["samples_ms"]["candidate"]]}


def _reshaped(v, speedup_of):
    """A timed verdict with each shape's speedup replaced by `speedup_of(its speedup)`."""
    for s in v.shapes:
        _scale_shape(s, speedup_of(s["speedup"]) / s["speedup"])
    v.geomean_speedup = math.exp(sum(math.log(s["speedup"]) for s in v.shapes) / len(v.shapes))
    return v


class NoHeadroom(model_referee.ModelReferee):
    """A harness with no headroom: every candidate is the model's kernel at a tenth of its speed (all
    slower than the base), and each evaluation takes EVAL_S."""

    def evaluate(self, code, **kw):
        if kw.get("timing") == "staged":
            time.sleep(EVAL_S)
            return super().evaluate(code, **kw)
        v = super().evaluate(code, **kw)
        return v if code is None or not v.accepted or not v.timed else _reshaped(v, lambda sp: sp / 10)


class Plateau(model_referee.ModelReferee):
    """Every candidate 1.5x on every shape: after the first, each is a contender that ties the best."""

    def evaluate(self, code, **kw):
        v = super().evaluate(code, **kw)
        if code is None or not v.accepted or not v.timed or kw.get("timing") == "staged":
            return v
        return _reshaped(v, lambda sp: 1.5)


def test_a_run_with_minutes_spends_them_when_its_space_is_not_covered(tmp_path, fake_gpu):  # noqa: F811
    """(a) No candidate beats the base: nothing could change the best, so nothing stops the run
    before its minutes are spent (formerly 30 proposals without a better candidate did, a third of
    the way in); the demo's 66 launch sets are not all measured in that time."""
    minutes = 0.25
    result = _run(tmp_path, budget=None, minutes=minutes, referee_factory=NoHeadroom)
    assert result["stop_reason"] == f"time budget of {minutes} minutes spent"
    assert result["timeline"]["search_s"] >= 0.9 * minutes * 60, result["timeline"]
    assert result["space"]["launches"] == 66 and not result["space"]["covered"]
    assert 0 < result["space"]["measured"] < 66 and result["winner"] is None


def test_a_run_with_minutes_ends_early_once_its_space_is_covered_and_says_so(tmp_path, fake_gpu, monkeypatch):  # noqa: F811
    """(b) The clamp launcher's 468 knob combinations make 11 distinct launches: a run given five
    minutes measures every one and ends within seconds, saying the space is covered."""
    targets = _clamp_target(tmp_path)
    _LaunchReferee.recorder, _LaunchReferee.folder, _LaunchReferee.seen = _Recorder(monkeypatch), tmp_path, {}
    result = optimize(SearchConfig(target="clamp", op="scale_rows", out=str(tmp_path / "run"), minutes=5,
                                   mutator="params", device="cuda", gpus=[0], progress=False,
                                   targets=str(targets)),
                      SearchHooks(referee_factory=_LaunchReferee, precompile=False))
    assert result["stop_reason"] == "search space covered: all 11 distinct launches measured"
    assert result["space"] == {"launches": 11, "measured": 11, "covered": True}
    assert result["timeline"]["search_s"] < 60
    assert len(set(_LaunchReferee.seen.values())) == 11  # what the candidates really launched


class _Configs:
    """Proposes the given (BLOCK, num_warps) configs of the demo's silu_and_mul, two a generation."""

    name = "params"

    def __init__(self, task, configs):
        self.task, self.configs = task, list(configs)

    def sync(self, rows):
        pass

    def propose(self, parent, inspirations, rng, known=None):
        if not self.configs:
            return None
        block, warps = self.configs.pop(0)
        code = self.task.base_code.replace("BLOCK = 64", f"BLOCK = {block}").replace(
            "num_warps=1", f"num_warps={warps}")
        return Proposal(mutator="params", parent_id=parent["id"], code=code,
                        params={"values": {"silu_and_mul:BLOCK": block}})


def test_a_screen_far_ahead_of_the_best_is_measured_in_full_in_the_first_generation(
        tmp_path, fake_gpu, monkeypatch):  # noqa: F811
    """(c) The model's fast configs all lose its 1-token shape (0.68x for BLOCK 4096 on 8 warps), so
    their screens skipped the full measurement and the run had no measured best. A screen 25% ahead
    of the best full measurement is promoted: the first generation's 5.9x is measured in full; the
    next 5.5x that loses the shape is not (it is not 25% ahead of 5.9x), and one that loses no
    shape is measured in full as every contender is."""
    import kernelsmith.search.loop as loop

    configs = [(4096, 8), (2048, 4), (512, 16), (1024, 32)]
    monkeypatch.setattr(loop, "build_mutators", lambda name, task, *a, **k: [_Configs(task, configs)])
    _run(tmp_path, budget=4, batch=2, pipeline=2)
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = [r for r in a.all() if not r.is_base]
    first = [r for r in rows if r.generation == 1]
    assert len(first) == 2 and first[0].depth == "full" and first[0].trusted_speedup > 5.8
    assert first[0].verdict.details["promoted"] and first[0].verdict.details["screen_lost_shapes"] == [0]
    assert first[1].depth == "screen" and first[1].verdict.details["screen_lost_shapes"] == [0]
    assert "promoted" not in first[1].verdict.details
    # 3.65x and 4.81x lose no shape: contenders of the best measured win (none yet: the base's 1.0).
    assert [r.depth for r in rows if r.generation == 2] == ["full", "full"]


def test_a_small_space_is_enumerated_nearest_the_fastest_first(tmp_path, fake_gpu, monkeypatch):  # noqa: F811
    """(d) The clamp space's 11 launch sets (fewer than rules.ENUMERATE_LAUNCHES): every one is
    measured, and each single config proposed launches the untried set nearest (log2 steps of each
    shape's warp count) the fastest set judged before it, to the last one (the start-up walk stopped
    after its 6 proposals, and TPE drew the rest)."""
    targets = _clamp_target(tmp_path)
    _LaunchReferee.recorder, _LaunchReferee.folder, _LaunchReferee.seen = _Recorder(monkeypatch), tmp_path, {}
    result = optimize(SearchConfig(target="clamp", op="scale_rows", out=str(tmp_path / "run"), seed=1,
                                   mutator="params", device="cuda", gpus=[0], progress=False,
                                   targets=str(targets)),
                      SearchHooks(referee_factory=_LaunchReferee, precompile=False))
    task = load_task("clamp", "scale_rows", targets=str(targets))
    mutator = ParamsMutator(task, device="cuda")
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = a.all()
    judged: dict[tuple, float] = {}
    singles = 0
    every = {_launched(mutator, {"values": dict(zip([t.key for t in mutator.tunables], c, strict=True))})
             for c in _combos(mutator)}
    base = _launched(mutator, {"values": mutator.base_values})
    assert len(every) == 11
    for r in rows:
        params = r.params or {"values": mutator.base_values}
        if params.get("table"):
            continue
        here = _launched(mutator, params)
        if judged:
            fastest = max(judged, key=judged.get)
            incumbent = fastest if judged[fastest] > 1.0 else base
            assert _steps(incumbent, here) == min(_steps(incumbent, t) for t in every - set(judged)), r.id
            singles += 1
        judged[here] = r.speedup or 1.0
    assert singles == 10 and set(judged) == every
    assert result["stop_reason"] == "search space covered: all 11 distinct launches measured"


def _combos(mutator):
    import itertools

    return itertools.product(*(t.domain for t in mutator.tunables))


def test_stagnation_counts_only_measurements_that_could_have_changed_the_best(tmp_path, fake_gpu):  # noqa: F811
    """(e) Screens far behind the base change nothing: 20 of them do not stop a run whose stagnation
    is 3 (formerly 3 proposals did). Candidates that tie the best, each measured in full, do."""
    slow = _run(tmp_path, "slow", budget=20, stagnation=3, referee_factory=NoHeadroom)
    assert slow["stop_reason"] == "budget of 20 proposals spent" and slow["proposals"] == 20
    flat = _run(tmp_path, "flat", budget=20, stagnation=3, referee_factory=Plateau)
    said = r"stagnation: no better candidate in (\d+) measurements that could have changed it"
    counted = re.fullmatch(said, flat["stop_reason"])
    assert counted and 3 <= int(counted.group(1)) <= 4  # tallied a generation (two) at a time
    with Archive(tmp_path / "flat" / "archive.sqlite") as a:
        rows = [r for r in a.all() if not r.is_base]
    assert flat["proposals"] < 20 and sum(r.depth == "full" for r in rows) >= 4


def _verdict_row(depth: str | None, accepted: bool = True, **details) -> Candidate:
    timing = {"full": {"aa_ratio": 1.0, "noisy": False}, "screen": {"mode": "screen"},
              "screen_subset": {"mode": "screen_subset"}}.get(depth, {})
    verdict = {"accepted": accepted, "timed": depth is not None, "timing": timing, "geomean_speedup": 1.1,
               "details": {"timing_depth": depth, **details} if depth else details}
    return Candidate.from_row({"id": 2, "mutator": "params", "status": "evaluated", "accepted": accepted,
                               "timing": "screen" if depth == "screen_subset" else depth, "verdict": verdict,
                               "speedup": 1.1})


def test_what_could_have_changed_the_best():
    """A full measurement, or a screen that reached the bar and lost a shape; not a screen behind
    the bar, one stopped on the representative shapes, nor a rejection."""
    from kernelsmith.search import rules

    assert rules.could_change_best(_verdict_row("full"))
    assert rules.could_change_best(_verdict_row("screen", screen_lost_shapes=[0]))
    assert not rules.could_change_best(_verdict_row("screen"))
    assert not rules.could_change_best(_verdict_row("screen_subset"))
    assert not rules.could_change_best(_verdict_row("full", accepted=False))


@pytest.mark.parametrize("launches, minutes, want", [
    (432, None, 44), (78, None, 12), (66, None, 12), (5000, None, 500),  # a tenth, at least 12
    (64, None, math.inf), (11, None, math.inf),  # enumerated: the space ends the run
    (432, 2.0, math.inf),  # a time budget is spent
    (None, None, 30),  # no countable space (a model writing code): 3/4 of the budget of 40
])
def test_the_stagnation_count_scales_with_the_distinct_launches(launches, minutes, want):
    from kernelsmith.search import rules

    assert rules.default_stagnation(launches, 40, minutes=minutes) == want
