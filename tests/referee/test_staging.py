"""Multi-fidelity timing (timing/staged.py) driven by a stub timer: representative shapes, the subset
cut, the all-shape screen and the full measurement, and what a subset-only verdict says."""

from __future__ import annotations

import pytest

from kernelsmith.referee.timing import ab as timing
from kernelsmith.referee.timing import staged as staging
from kernelsmith.referee.verdict import Verdict, subset_geomean, timing_depth


def test_representative_shapes_span_the_sizes_deterministically():
    assert staging.representative([5.0, 1.0]) == [0, 1]
    sizes = [40.0, 10.0, 30.0, 20.0, 50.0, 60.0, 70.0, 15.0]
    picks = staging.representative(sizes)
    assert picks == staging.representative(list(sizes)) and len(picks) == 3
    assert 1 in picks and 6 in picks  # smallest and largest
    assert picks == [0, 1, 6]  # 10 and 70, and 40: the middle of the sorted sizes
    assert staging.representative([3.0, 3.0, 3.0, 3.0]) == [0, 2, 3]  # ties broken by index


class StubTimer:
    """Fills `out` as timing.time_candidate does, from fixed per-shape speedups per mode."""

    def __init__(self, out: dict, screen: list[float], full: list[float] | None = None,
                 ci: list[tuple[float, float]] | None = None, rescreen: list[float] | None = None):
        self.out = out
        self.speed = {"screen": screen, "full": full or screen, "rescreen": rescreen or screen}
        self.ci = ci  # the screen's per-shape 95% CIs (None: none recorded)
        self.calls: list[tuple[str, list[int]]] = []

    def __call__(self, mode, indices, host):
        idx = list(range(len(self.out["shapes"]))) if indices is None else list(indices)
        self.calls.append((mode, idx))
        for i in idx:
            self.out["shapes"][i].update({"speedup": self.speed[mode][i],
                                          "aa_ratio": 1.001 if mode == "full" else None,
                                          "ci95": list(self.ci[i]) if self.ci and mode != "full" else None})
        timing.conclude(self.out, "screen" if mode == "rescreen" else mode)
        return True


def _out(n: int) -> dict:
    return {"shapes": [{"shape": {"n": i}} for i in range(n)], "violations": [],
            "details": {"messages": []}, "timing": {}}


SIZES = [1.0, 2.0, 3.0, 4.0, 5.0]  # subset: shapes 0, 2, 4


def test_far_behind_on_the_subset_stops_there_with_no_all_shape_geomean():
    out = _out(5)
    timer = StubTimer(out, [0.8, 3.0, 0.8, 3.0, 0.8])  # fast only where the subset does not look
    depth = staging.run_staged(timer, out, SIZES, contender_at=1.2)
    assert depth == "screen_subset" and timer.calls == [("screen", [0, 2, 4])]
    assert out["geomean_speedup"] is None and out["timing"]["mode"] == "screen_subset"
    assert out["details"]["subset_geomean"] == pytest.approx(0.8)
    assert out["details"]["subset_shapes"] == [0, 2, 4]
    assert out["shapes"][1].get("speedup") is None  # nothing is made up for the shapes not timed
    v = Verdict(accepted=False, correct=True, shapes=out["shapes"], timed=True, timing=out["timing"],
                details=out["details"]).finalize()
    data = v.to_json()
    assert timing_depth(data) == "screen_subset" and subset_geomean(data) == pytest.approx(0.8)
    assert "representative shapes only" in v.feedback() and "not a contender" in v.summary()


def test_near_the_bar_goes_on_to_every_shape_and_a_contender_to_full():
    out = _out(5)
    # Just below the bar on the subset (1.2 >= 0.95 * 1.25), fast elsewhere: a contender after all.
    timer = StubTimer(out, [1.2, 1.5, 1.2, 1.5, 1.2], full=[1.3] * 5)
    depth = staging.run_staged(timer, out, SIZES, contender_at=1.25)
    assert depth == "full" and [m for m, _ in timer.calls] == ["screen", "screen", "full"]
    assert timer.calls[1] == ("screen", [1, 3]) and timer.calls[2] == ("full", [0, 1, 2, 3, 4])
    assert out["details"]["screen_geomean"] == pytest.approx((1.2 ** 3 * 1.5 ** 2) ** 0.2)
    assert out["details"]["subset_geomean"] == pytest.approx(1.2)
    assert out["geomean_speedup"] == pytest.approx(1.3) and out["timing"]["aa_ratio"] == pytest.approx(1.001)
    assert out["details"]["timing_depth"] == "full" and out["timing"]["noisy"] is False


def test_an_all_shape_screen_below_the_bar_is_a_plain_screen():
    out = _out(5)
    timer = StubTimer(out, [1.2, 0.5, 1.2, 0.5, 1.2])
    assert staging.run_staged(timer, out, SIZES, contender_at=1.2) == "screen"
    assert out["geomean_speedup"] == pytest.approx((1.2 ** 3 * 0.25) ** 0.2)
    assert timing_depth({"timed": True, **out}) == "screen" and len(timer.calls) == 2


def test_a_screen_that_loses_a_shape_beyond_its_ci_is_no_contender_however_fast():
    # SGLang fused_rmsnorm's launch configs: 1.3-1.4x on large shapes, 0.86x at one token, which
    # the winner rule (no shape below SLOWEST_SHAPE beyond its CI) fails whatever the geomean.
    out = _out(5)
    ci = [(1.2, 1.4), (1.4, 1.6), (1.2, 1.4), (1.4, 1.6), (0.78, 0.93)]
    timer = StubTimer(out, [1.3, 1.5, 1.3, 1.5, 0.86], ci=ci)
    assert staging.run_staged(timer, out, SIZES, contender_at=1.0) == "screen"
    assert [m for m, _ in timer.calls] == ["screen", "screen"]  # no full measurement
    assert out["details"]["screen_lost_shapes"] == [4] and out["geomean_speedup"] > 1.2
    v = Verdict(accepted=True, correct=True, shapes=out["shapes"], timed=True, timing=out["timing"],
                details=out["details"]).finalize()
    assert "cannot be the winner" in v.feedback() and timing_depth(v.to_json()) == "screen"


@pytest.mark.parametrize("promote_at, depth", [(1.25, "full"), (1.3, "screen"), (None, "screen")])
def test_a_screen_far_ahead_is_promoted_to_the_full_measurement_though_it_loses_a_shape(promote_at, depth):
    # The same lost shape; its all-shape geomean, 1.27x, reaches a promotion bar of 1.25 (the search's
    # PROMOTE_MARGIN over its best full measurement: the base's 1.0), not one of 1.3.
    out = _out(5)
    ci = [(1.2, 1.4), (1.4, 1.6), (1.2, 1.4), (1.4, 1.6), (0.78, 0.93)]
    timer = StubTimer(out, [1.3, 1.5, 1.3, 1.5, 0.86], full=[1.3, 1.5, 1.3, 1.5, 0.9], ci=ci)
    assert staging.run_staged(timer, out, SIZES, contender_at=1.0, promote_at=promote_at) == depth
    assert out["details"]["screen_lost_shapes"] == [4]
    assert out["details"].get("promoted", False) == (depth == "full")
    assert [m for m, _ in timer.calls][-1] == ("full" if depth == "full" else "screen")


def test_a_slow_looking_shape_whose_screen_ci_reaches_the_floor_still_earns_the_full_measurement():
    # A screen has 8-12 repetitions: 0.95x at one token with a CI up to 1.05 may well be 1.0x.
    out = _out(5)
    ci = [(1.2, 1.4), (1.4, 1.6), (1.2, 1.4), (1.4, 1.6), (0.86, 1.05)]
    timer = StubTimer(out, [1.3, 1.5, 1.3, 1.5, 0.95], full=[1.3] * 5, ci=ci)
    assert staging.run_staged(timer, out, SIZES, contender_at=1.0) == "full"
    assert "screen_lost_shapes" not in out["details"]


@pytest.mark.parametrize("n, bar", [(3, 2.0), (5, None)])
def test_no_subset_stage_without_a_bar_or_with_few_shapes(n, bar):
    out = _out(n)
    timer = StubTimer(out, [1.0] * n)
    assert staging.run_staged(timer, out, SIZES[:n], contender_at=bar) == "screen"
    assert timer.calls == [("screen", list(range(n)))] and "subset_geomean" not in out["details"]


def test_the_subset_bar_is_the_bests_own_geomean_on_those_shapes():
    """A best at 15x on shapes 1 and 3 and 9x on the subset (0, 2, 4): a candidate at 9.5x on the
    subset and 16x elsewhere beats it, and must not be cut by a bar set by all of its shapes."""
    best = [9.0, 15.0, 9.0, 15.0, 9.0]
    bar = (9.0 ** 3 * 15.0 ** 2) ** 0.2  # the best's all-shape geomean, 11.3x
    assert staging.subset_bar(bar, best, [0, 2, 4]) == pytest.approx(9.0)
    out = _out(5)
    timer = StubTimer(out, [9.5, 16.0, 9.5, 16.0, 9.5])
    assert staging.run_staged(timer, out, SIZES, contender_at=bar, best_shapes=best) == "full"
    assert out["details"]["subset_bar"] == pytest.approx(9.0)
    # Against the unscaled bar (the best's per-shape speedups unknown) it stops at the subset.
    out = _out(5)
    timer = StubTimer(out, [9.5, 16.0, 9.5, 16.0, 9.5])
    assert staging.run_staged(timer, out, SIZES, contender_at=bar, best_shapes=[None] * 5) == "screen_subset"
    assert out["details"]["subset_bar"] == pytest.approx(bar)


CLOSE = [(0.99, 1.05)] * 3  # a screen's CIs on a few-microsecond kernel: +-3%


def test_a_screen_just_below_the_bar_within_its_ci_is_screened_again_and_decided_on_both():
    # SGLang gelu_and_mul: the set that won three sweeps (1.025x measured in full) screened at 1.013x
    # under a bar of 1.02x and was never measured in full.
    out = _out(3)
    timer = StubTimer(out, [1.013] * 3, full=[1.025] * 3, ci=CLOSE, rescreen=[1.024] * 3)
    assert staging.run_staged(timer, out, SIZES[:3], contender_at=1.02) == "full"
    assert [m for m, _ in timer.calls] == ["screen", "rescreen", "full"]
    assert out["details"]["first_screen_geomean"] == pytest.approx(1.013)
    assert out["details"]["screen_geomean"] == pytest.approx(1.024)  # what the decision read
    # Screened again and still below: a screen, both geomeans kept.
    out = _out(3)
    timer = StubTimer(out, [1.013] * 3, ci=CLOSE, rescreen=[1.015] * 3)
    assert staging.run_staged(timer, out, SIZES[:3], contender_at=1.02) == "screen"
    assert [m for m, _ in timer.calls] == ["screen", "rescreen"]
    assert out["details"]["first_screen_geomean"] == pytest.approx(1.013)
    assert out["geomean_speedup"] == pytest.approx(1.015) and out["details"]["timing_depth"] == "screen"


def test_a_screen_whose_ci_stays_below_the_bar_is_not_screened_again():
    out = _out(3)
    timer = StubTimer(out, [0.95] * 3, ci=[(0.93, 0.97)] * 3)
    assert staging.run_staged(timer, out, SIZES[:3], contender_at=1.0) == "screen"
    assert [m for m, _ in timer.calls] == ["screen"] and "first_screen_geomean" not in out["details"]


def test_near_miss_combines_the_shapes_cis_and_needs_all_of_them():
    shapes = [{"ci95": [0.99, 1.05]}] * 4  # log half-width 0.0298 each; combined: 0.0298 / 2
    assert staging.near_miss(shapes, 1.0, 1.014)
    assert not staging.near_miss(shapes, 1.0, 1.016)  # beyond the geomean's CI
    assert not staging.near_miss(shapes, 1.02, 1.02)  # at the bar: a contender already
    assert not staging.near_miss(shapes, None, 1.0) and not staging.near_miss(shapes, 1.0, None)
    assert not staging.near_miss(shapes[:3] + [{"ci95": None}], 1.0, 1.001)  # a shape without a CI
    assert not staging.near_miss([], 1.0, 1.001)
