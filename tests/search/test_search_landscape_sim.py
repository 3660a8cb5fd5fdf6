"""dev/probes/landscape_sim.py replays a finished sweep as a landscape and runs the search against it."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys

import pytest
from test_search_loop import ROOT, _run, fake_gpu  # noqa: F401 - fake_gpu is a fixture

from kernelsmith.search.archive import Archive
from kernelsmith.search.mutators.space import ConfigSpace

PROBES = ROOT / "dev" / "probes"


def test_a_sweep_replayed_as_a_landscape_gives_each_seeds_evaluations_to_95_percent(tmp_path, fake_gpu):  # noqa: F811
    _run(tmp_path, name="sweep", mutator="grid", command="sweep", budget=None)
    cmd = [sys.executable, str(PROBES / "landscape_sim.py"), "--target", "demo",
           "--op", "silu_and_mul", "--archive", str(tmp_path / "sweep" / "archive.sqlite"),
           "--seeds", "0-1", "--budget", "30"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELSMITH_TARGETS": str(ROOT / "targets")}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    # Every single config the sweep judged is a point (not the base, the landscape's 1.0x, nor the
    # per-shape table a sweep measures after its grid).
    with Archive(tmp_path / "sweep" / "archive.sqlite") as a:
        singles = [c for c in a.all() if c.mutator == "grid" and not (c.params or {}).get("table")]
        tables = [c for c in a.all() if (c.params or {}).get("table")]
    points = int(re.search(r"^landscape: (\d+) configs, best ([\d.]+)x", text, re.M).group(1))
    assert points == len(singles) == 65 and len(tables) == 1
    seeds = re.findall(r"^seed (\d): (\d+) evaluations, ([\d.]+) referee-s$", text, re.M)
    assert [s[0] for s in seeds] == ["0", "1"], text[-2000:]
    assert all(1 <= int(n) <= 30 and float(sec) > 0 for _, n, sec in seeds)
    assert "missed at 0 of 2 seeds" in text and "outside the landscape" not in text


def _landscape_sim():
    """dev/probes/landscape_sim.py as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("landscape_sim", PROBES / "landscape_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_config_takes_the_point_of_the_launch_twin_the_sweep_judged():
    """A sweep judges one config per launch set; the replay gives every other config of that set its
    point (and the base's twins the base's 1.0x), on a clamped launcher where 468 knob combinations
    make a few launch sets."""
    from test_search_launch_twins import _task

    sim = _landscape_sim()
    ref = object.__new__(sim.LandscapeReferee)
    ref.task, ref.shapes = _task(), [None] * 3
    ref.space, ref._twins, ref._base_key, ref.MISSES = None, None, None, []
    space = ConfigSpace(ref.task, device="cuda")
    keys = [t.key for t in space.tunables]
    combos = [dict(zip(keys, c, strict=True)) for c in itertools.product(*(t.domain for t in space.tunables))]
    by_launch: dict = {}
    for values in combos:
        by_launch.setdefault(space.twins.signature({"values": values}), []).append(values)
    assert len(combos) == 468 and 1 < len(by_launch) < 100
    base_sig = space.twins.signature({"values": json.loads(ref.base_key())})
    judged = {sig: group[-1] for sig, group in by_launch.items() if sig != base_sig}
    ref.LAND = {json.dumps(v, sort_keys=True): {"speeds": [1.0 + i / 100] * 3, "eval_s": 1.0}
                for i, v in enumerate(judged.values())}
    for sig, group in by_launch.items():
        for values in group:
            got = ref.point(json.dumps(values, sort_keys=True))
            want = ref.LAND[json.dumps(judged[sig], sort_keys=True)] if sig != base_sig else None
            assert got == (want or {"speeds": [1.0] * 3, "eval_s": 2.0}), values
    assert ref.MISSES == []
    ref.LAND.pop(json.dumps(next(iter(judged.values())), sort_keys=True))
    ref._twins = None  # a launch set the sweep never judged: no point, and the miss is noted
    lost = next(iter(by_launch[next(iter(judged))]))
    assert ref.point(json.dumps(lost, sort_keys=True)) is None and len(ref.MISSES) == 1


def test_with_noise_each_timing_draws_from_the_recorded_cis_reproducibly():
    """--noise: a timed evaluation draws each shape's speedup around its point, as wide as the 95% CI
    the sweep recorded there (none where it recorded none); the same run seed and candidate draw the
    same, another candidate anew; without --noise the point itself."""
    sim = _landscape_sim()
    assert sim._sigma([0.98, 1.02]) > 0.0 and sim._sigma(None) == 0.0 and sim._sigma([0.0, 1.0]) == 0.0
    ref = object.__new__(sim.LandscapeReferee)
    ref.shapes = [{"n": 1}, {"n": 2}, {"n": 3}]
    point = {"speeds": [1.0, 1.2, 0.9], "sigma": [0.0, sim._sigma([1.1, 1.3]), sim._sigma([0.85, 0.95])],
             "eval_s": 0.3}
    ref.point_of = lambda code, cid: point

    def speeds(cid, noise):
        ref.NOISE = noise
        v = ref.evaluate("code", timing="screen", candidate_id=cid)
        return [s["speedup"] for s in v.shapes]

    assert speeds(1, None) == [1.0, 1.2, 0.9]
    a, again, other = speeds(1, "0"), speeds(1, "0"), speeds(2, "0")
    assert a == again and a != other and a != [1.0, 1.2, 0.9]
    assert a[0] == 1.0  # no CI recorded on that shape: no noise
    draws = [speeds(c, "0")[1] for c in range(200)]
    assert 1.1 < sorted(draws)[100] < 1.3 and min(draws) < 1.15 and max(draws) > 1.25


def test_the_target_is_the_sweeps_measured_table_when_it_beats_every_single(tmp_path, fake_gpu):  # noqa: F811
    """As search.compare: a sweep's per-shape table, measured after its grid, is the reference when
    it is faster than its best single config (a table of the params mutator's own is not)."""
    _run(tmp_path, name="sweep", mutator="grid", command="sweep", budget=None)
    sim = _landscape_sim()
    archive = str(tmp_path / "sweep" / "archive.sqlite")
    with Archive(archive) as a:
        tables = [c.speedup for c in a.all() if c.mutator == "grid" and (c.params or {}).get("table")]
        singles = [c.speedup for c in a.all() if c.mutator == "grid" and not (c.params or {}).get("table")]
    assert len(tables) == 1
    want = max(tables[0] or 0.0, max(s for s in singles if s))
    # result.json keeps 4 decimals
    assert sim.sweep_reference_of([archive]) == pytest.approx(want, rel=1e-4)
    assert sim.sweep_reference_of([archive, archive]) == pytest.approx(want, rel=1e-4)
    assert sim.sweep_reference_of([str(tmp_path / "nowhere" / "archive.sqlite")]) is None


def test_screens_draw_as_widely_as_the_landscapes_screens_and_a_second_screen_costs_its_timing():
    """A config measured in full recorded its full measurement's narrow CI; its screens draw at least
    as widely as the landscape's screen-only points do on each shape (screen_sigma), a full
    measurement from its own CI; a second screen is charged the point's recorded screen seconds."""
    sim = _landscape_sim()
    land = {"a": {"sigma": [0.01, 0.02], "depth": "screen"}, "b": {"sigma": [0.03, 0.04], "depth": "screen"},
            "c": {"sigma": [0.001, 0.001], "depth": "full"}, "d": {"reason": "timeout"}}
    assert sim.screen_sigma(land) == pytest.approx([0.02, 0.03])  # medians of the screens; "c" left out
    assert sim.screen_sigma({"c": land["c"]}) == []
    ref = object.__new__(sim.LandscapeReferee)
    ref.shapes = [{"n": 1}, {"n": 2}]
    point = {"speeds": [1.02, 1.02], "sigma": [0.001, 0.001], "eval_s": 0.9, "screen_s": 0.08}
    ref.point_of = lambda code, cid: point
    ref.NOISE, ref.SCREEN_SIGMA = "0", [0.02, 0.03]

    def spread(timing):
        draws = [ref.evaluate("code", timing=timing, candidate_id=c).shapes[1]["speedup"] for c in range(300)]
        return max(draws) / min(draws)

    assert spread("screen") > 1.1 and spread("full") < 1.01
    assert ref.evaluate("code", timing="rescreen", candidate_id=1).eval_s == 0.08
    assert ref.evaluate("code", timing="screen", candidate_id=1).eval_s == 0.9
    assert ref.evaluate("code", timing="full", candidate_id=1).eval_s == 0.0
