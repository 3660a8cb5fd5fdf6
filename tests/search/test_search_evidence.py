"""A winner is a measured win: the geomean's bootstrap CI above 1.0 and no shape slower than 0.98x
beyond its CI (evidence.py), and a run whose finalists all fail that ends without a winner (exit 1)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from statistics import NormalDist

import model_referee
import pytest
import torch

from kernelsmith.cli import main
from kernelsmith.search.archive import NewRow
from kernelsmith.search.evidence import geomean_ci, judge

ROOT = Path(__file__).resolve().parents[2]
N = 31
Z = [NormalDist().inv_cdf((i + 0.5) / N) for i in range(N)]  # symmetric normal quantiles


def shape(speedup: float, spread: float, name: int = 0, ci=None, pct_roofline=None) -> dict:
    """A verdict shape entry: base at 1 ms, the candidate at 1/speedup ms with a log-normal spread."""
    cand = [round(math.exp(spread * z) / speedup, 6) for z in Z]
    return {"shape": {"n": name}, "speedup": speedup, "baseline_ms": 1.0, "candidate_ms": 1 / speedup,
            "ci95": ci or [speedup * (1 - 2 * spread / N**0.5), speedup * (1 + 2 * spread / N**0.5)],
            "pct_roofline": pct_roofline, "samples_ms": {"base": [1.0] * N, "candidate": cand}}


def verdict(shapes: list[dict]) -> dict:
    g = math.exp(sum(math.log(s["speedup"]) for s in shapes) / len(shapes))
    return {"accepted": True, "timed": True, "geomean_speedup": g, "shapes": shapes,
            "timing": {"aa_ratio": 1.0, "noisy": False}}


def test_a_1_02x_candidate_whose_ci_reaches_below_1_is_not_a_winner():
    v = verdict([shape(1.02, 0.07)])
    got = judge(v, seed=0)
    lo, hi = got["geomean_ci95"]
    assert lo == pytest.approx(0.99, abs=0.005) and hi == pytest.approx(1.05, abs=0.005)
    assert got["win"] is False
    interval = f"95% CI [{lo:.3f}, {hi:.3f}]"
    assert got["reason"] == f"geomean 1.020x, {interval}: the interval does not lie above 1.0"


def test_one_shape_slower_beyond_its_ci_disqualifies():
    fast = [shape(1.5, 0.01, i) for i in range(3)]
    slow = shape(0.95, 0.01, 9, ci=[0.93, 0.97])
    got = judge(verdict(fast + [slow]), seed=0)
    assert got["geomean_ci95"][0] > 1.2  # the geomean alone would call it a clear win
    assert got["win"] is False
    assert "1 shape(s) slower than 0.98x beyond the CI" in got["reason"]
    assert "n=9: 0.950x, 95% CI [0.930, 0.970]" in got["reason"]
    # Slower within noise (the CI reaches 0.98 or above) is no disqualification.
    within = shape(0.97, 0.01, 9, ci=[0.95, 0.99])
    assert judge(verdict(fast + [within]), seed=0)["win"] is True


def test_a_clear_win_passes_and_the_interval_is_reproducible():
    v = verdict([shape(2.0, 0.03, 0), shape(1.3, 0.03, 1)])
    got = judge(v, seed=7)
    assert got["win"] is True and got["reason"] is None
    lo, hi = got["geomean_ci95"]
    assert 1.55 < lo < v["geomean_speedup"] < hi < 1.68
    assert judge(v, seed=7) == got


def test_the_geomean_ci_floors_each_shape_at_the_roofline():
    # The candidate "beats" physics 10x on shape 0; its roofline (pct_roofline 1000%: the roof is 10x
    # the candidate's time) caps that shape at base / roof = 2x, as the referee's speedup is capped.
    capped = shape(20.0, 0.01, 0, pct_roofline=1000.0)
    lo, hi = geomean_ci([capped], seed=0)
    assert 1.99 < lo <= hi < 2.01


def test_the_geomean_ci_floors_the_base_at_the_roofline_too():
    # The base already past its roofline estimate (102%: roof = 1.02 ms, base 1.0 ms) and the
    # candidate equal: a tie, not 0.98x.
    tie = shape(1.0, 0.0, 0, pct_roofline=102.0)
    lo, hi = geomean_ci([tie], seed=0)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)


def test_no_samples_or_noise_or_rejection_is_no_win():
    bare = verdict([shape(3.0, 0.01)])
    del bare["shapes"][0]["samples_ms"]
    assert "no timing samples" in judge(bare, 0)["reason"]
    noisy = verdict([shape(3.0, 0.01)])
    noisy["timing"]["noisy"] = True
    assert "A/A control" in judge(noisy, 0)["reason"]
    rejected = judge({"accepted": False, "reason": "incorrect"}, 0)
    assert rejected["reason"] == "rejected on re-measurement (incorrect)"


class NoHeadroomReferee(model_referee.ModelReferee):
    """Every candidate 1.02x with a CI from 0.99 to 1.05: no measured win anywhere."""

    def evaluate(self, code, **kw):
        v = super().evaluate(code, **kw)
        if code is None or not v.timed:
            return v
        spread = 0.07 * math.sqrt(len(v.shapes))  # independent shapes narrow the geomean's CI
        v.shapes = [{**s, **shape(1.02, spread, i), "shape": s["shape"]} for i, s in enumerate(v.shapes)]
        v.geomean_speedup = 1.02
        return v


@pytest.fixture
def fake_gpu(monkeypatch):
    import kernelsmith.referee as referee
    import kernelsmith.referee.backend as backend
    from kernelsmith.search.precompile import Precompiler

    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(referee, "Referee", NoHeadroomReferee)
    monkeypatch.setattr(Precompiler, "maybe", staticmethod(lambda *a, **k: None))


def test_a_run_without_a_measured_win_exits_1_and_says_why(tmp_path, fake_gpu, capsys):
    out = tmp_path / "run"
    rc = main(["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--mutator", "params",
               "--budget", "4", "--device", "cuda", "--out", str(out), "--no-progress"])
    assert rc == 1
    result = json.loads((out / "result.json").read_text())
    assert result["winner"] is None and result["geomean_speedup"] is None and result["shapes"] == []
    reason = result["no_winner_reason"]
    assert reason.startswith("none of the ") and "re-measured finalist(s) is a measured win" in reason
    lows = [float(x) for x in re.findall(r"geomean 1\.020x, 95% CI \[(\d\.\d+), ", reason)]
    assert lows and all(lo <= 1.0 for lo in lows) and "the interval does not lie above 1.0" in reason
    finals = result["final_measurements"]
    assert finals and all(f["accepted"] and f["measured_win"] is False for f in finals)
    report = (out / "report.md").read_text()
    assert "no faster candidate found" in report and f"**No winner:** {reason}." in report
    assert "accepted, not a measured win" in report
    assert f"no winner: {reason}" in capsys.readouterr().err
    assert not (out / "winner" / "winner.diff").exists()


def test_finalists_that_already_pass_the_rule_are_re_measured_first(tmp_path):
    """With one re-measurement to spend, a faster candidate that loses a shape must not take it from
    a slower one that is a measured win."""
    from types import SimpleNamespace

    from kernelsmith.search.archive import Archive
    from kernelsmith.search.finish import no_winner_reason, pick_winner

    verdicts = {
        "lossy": verdict([shape(3.0 * 3.0 / 0.9, 0.01, 0), shape(0.9, 0.01, 1, ci=[0.89, 0.91])]),
        "clean": verdict([shape(1.5, 0.01, 0), shape(1.5, 0.01, 1)]),
    }
    with Archive(tmp_path / "a.sqlite") as archive:
        bid = archive.add(NewRow("base", mutator="base"))
        ids = {}
        for name, v in verdicts.items():
            ids[name] = archive.add(NewRow(f"code {name}", mutator="params", parent_id=bid))
            archive.set_verdict(ids[name], v, "", timing="full")
        remeasured = []

        def remeasure(row, seed):
            remeasured.append(row["id"])
            return row["verdict"]

        def search(k):
            return SimpleNamespace(archive=archive, hooks=SimpleNamespace(final_k=k), seed=0, timed=True,
                                   progress=SimpleNamespace(note=lambda *a: None),
                                   task=SimpleNamespace(base_code="base"))

        row, _, measured = pick_winner(search(1), SimpleNamespace(remeasure=remeasure))
        assert remeasured == [ids["clean"]] and row["id"] == ids["clean"]
        assert measured[0]["measured_win"] and measured[0]["final_ci95"][0] > 1.4
        # Both re-measured: the lossy one is refused on its own re-measurement, the reason kept.
        archive.set_meta("final", {})
        remeasured.clear()
        row, _, measured = pick_winner(search(2), SimpleNamespace(remeasure=remeasure))
        assert remeasured == [ids["clean"], ids["lossy"]] and row["id"] == ids["clean"]
        lossy = next(m for m in measured if m["id"] == ids["lossy"])
        assert lossy["measured_win"] is False and "slower than 0.98x beyond the CI" in lossy["not_a_win"]
        assert no_winner_reason(search(2), [lossy]).startswith(
            f"none of the 1 re-measured finalist(s) is a measured win: #{ids['lossy']}: 1 shape(s) slower")


def test_a_noisy_final_measurement_is_taken_again_on_new_inputs(tmp_path):
    """The H200 run of the demo RMSNorm search lost its only finalist to one noisy re-measurement:
    a noisy final measurement is the machine's, so it is retaken (new inputs) before it is given up."""
    from types import SimpleNamespace

    from kernelsmith.search.archive import Archive
    from kernelsmith.search.finish import NOISY_RETAKES, pick_winner

    clean = verdict([shape(1.5, 0.01, 0), shape(1.5, 0.01, 1)])
    noisy = {**clean, "timing": {**clean["timing"], "noisy": True}}
    with Archive(tmp_path / "a.sqlite") as archive:
        bid = archive.add(NewRow("base", mutator="base"))
        cid = archive.add(NewRow("code", mutator="params", parent_id=bid))
        archive.set_verdict(cid, clean, "", timing="full")
        seeds = []

        def search():
            return SimpleNamespace(archive=archive, hooks=SimpleNamespace(final_k=1), seed=0, timed=True,
                                   progress=SimpleNamespace(note=lambda *a: None),
                                   task=SimpleNamespace(base_code="base"))

        def flaky(row, seed):
            seeds.append(seed)
            return noisy if len(seeds) == 1 else clean

        row, _, measured = pick_winner(search(), SimpleNamespace(remeasure=flaky))
        assert row["id"] == cid and measured[0]["measured_win"] and len(set(seeds)) == 2
        # Always noisy: retaken NOISY_RETAKES times, then reported as noisy (never a win).
        archive.set_meta("final", {})
        seeds.clear()
        always = SimpleNamespace(remeasure=lambda r, s: seeds.append(s) or noisy)
        row, _, measured = pick_winner(search(), always)
        assert row is None and measured[0]["noisy"] and len(seeds) == 1 + NOISY_RETAKES


def test_finalists_far_below_a_re_measured_win_are_not_re_measured(tmp_path):
    """The H200 sampler run re-measured 11.2x, 9.3x and 7.2x finalists (22 s of an 82 s run): once the
    11.2x one is a measured win, a finalist more than 5% slower cannot be the winner; one within 5%
    still is re-measured, and when the fastest fails its re-measurement the next ones are."""
    from types import SimpleNamespace

    from kernelsmith.report import search_stats
    from kernelsmith.search.archive import Archive
    from kernelsmith.search.finish import FINAL_SKIP_BELOW, pick_winner

    speeds = {"fast": 11.2, "close": 11.2 * (FINAL_SKIP_BELOW + 0.01), "far": 9.3, "farther": 7.2}
    with Archive(tmp_path / "a.sqlite") as archive:
        bid = archive.add(NewRow("base", mutator="base"))
        ids = {}
        for name, g in speeds.items():
            ids[name] = archive.add(NewRow(f"code {name}", mutator="params", parent_id=bid))
            archive.set_verdict(ids[name], verdict([shape(g, 0.01, 0), shape(g, 0.01, 1)]), "", timing="full")
        remeasured, broken = [], set()

        def remeasure(row, seed):
            remeasured.append(row["id"])
            if row["id"] in broken:
                return {"accepted": False, "reason": "incorrect"}
            return row["verdict"]

        search = SimpleNamespace(archive=archive, hooks=SimpleNamespace(final_k=4), seed=0, timed=True,
                                 progress=SimpleNamespace(note=lambda *a: None),
                                 task=SimpleNamespace(base_code="base"))
        ev = SimpleNamespace(remeasure=remeasure)
        row, _, measured = pick_winner(search, ev)
        assert row["id"] == ids["fast"] and remeasured == [ids["fast"], ids["close"]]
        skipped = [m for m in measured if m.get("skipped")]
        assert [m["id"] for m in skipped] == [ids["far"], ids["farther"]]
        assert all("cannot be the winner" in m["skipped"] and m["final_speedup"] is None for m in skipped)
        report = search_stats([], {"final_measurements": measured, "evaluations": 4, "accepted": 4})
        assert report.count("not re-measured: search geomean below 95% of a re-measured win (11.200x)") == 2
        # The fastest two fail on new inputs: nothing is skipped behind a win that is not there.
        archive.set_meta("final", {})
        remeasured.clear()
        broken.update({ids["fast"], ids["close"]})
        row, _, measured = pick_winner(search, ev)
        assert row["id"] == ids["far"] and remeasured == [ids["fast"], ids["close"], ids["far"]]
        assert [m["id"] for m in measured if m.get("skipped")] == [ids["farther"]]


def test_a_shapes_aa_bias_widens_the_geomean_ci_by_its_share():
    """A shape whose strayed A/A control its effect dwarfed (referee timing.aa_bias) keeps its bias in
    the geomean's interval: two shapes, one with a 1.4% bias, widen it by sqrt(1.014) each way."""
    plain = [shape(15.0, 0.01, 0), shape(5.0, 0.01, 1)]
    biased = [dict(plain[0], aa_bias=1.014), plain[1]]
    lo, hi = geomean_ci(plain, seed=3)
    blo, bhi = geomean_ci(biased, seed=3)
    assert blo == pytest.approx(lo / 1.014 ** 0.5) and bhi == pytest.approx(hi * 1.014 ** 0.5)
    assert judge(verdict(biased), seed=3)["win"] is True  # 8.7x: a 0.7% wider interval changes nothing


@pytest.mark.parametrize("poison", [0.5, -1.0, float("nan"), float("inf"), "1.5", True, [2.0]])
def test_an_aa_bias_the_referee_never_writes_leaves_no_interval(poison):
    """The archive is read back from disk: a bias below 1.0 would narrow the geomean's CI, so any value
    the referee cannot have written (timing.aa_bias gives a finite factor >= 1) makes it unknown and
    the verdict no measured win."""
    shapes = [dict(shape(15.0, 0.01, 0), aa_bias=poison), shape(5.0, 0.01, 1)]
    assert geomean_ci(shapes, seed=3) is None
    got = judge(verdict(shapes), seed=3)
    assert got["win"] is False and "no timing samples" in got["reason"]
