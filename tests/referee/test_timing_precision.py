"""A full measurement stops short of its repetition budget only once the ratios it reports are known
(timing.precise), and the judge refuses a reply that stopped short without that precision. Driven
by the synthetic backend of test_timing_logic; real numbers come from the H200 step."""

import random

import pytest
from test_timing_logic import FakeBackend, FakeSession, _rms

from kernelsmith.referee.link.errors import RunnerFailed
from kernelsmith.referee.timing import ab as timing
from kernelsmith.referee.timing import claims as J


class Counting(FakeBackend):
    """FakeBackend that records how many repetitions each time_calls call asked for."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked: list[int] = []

    def time_calls(self, fns, reps, order_seed):
        self.asked.append(reps)
        return super().time_calls(fns, reps, order_seed)


def _loop(backend, mode="full"):
    s = FakeSession(backend)
    shape = s.harness.shapes_for("interpret")[0]
    originals = [o for o, _ in s.timing_sets(shape, 0, timing.INPUT_SETS)]
    return timing.time_loop(s, _rms, originals, 0, 1, 0, mode, host=False)


def test_the_median_ci_halfwidth_shrinks_with_repetitions_and_grows_with_jitter():
    rng = random.Random(0)
    calm = [1.0 + 0.001 * rng.random() for _ in range(200)]
    jittery = [1.0 + 0.3 * rng.random() for _ in range(200)]
    assert timing.median_halfwidth(calm) < 0.001 < timing.median_halfwidth(jittery)
    assert timing.median_halfwidth(jittery[:30]) > timing.median_halfwidth(jittery)
    assert timing.precise([calm, calm[::-1]], 0.0025) and not timing.precise([calm, jittery], 0.0025)


def test_a_steady_shape_stops_after_its_first_batch():
    backend = Counting([0.2, 0.1, 0.2], jitter=0.001)
    r = _loop(backend)
    assert timing.planned_reps(r["probe"], 3, timing.FULL) > timing.FULL["min_reps"]  # it could run more
    assert backend.asked[1:] == [timing.FULL["min_reps"]]  # after the 3-rep probe: one batch, precise
    assert r["reps"] == timing.FULL["min_reps"] == len(r["base"]) == len(r["cand"]) == len(r["aa"])


def test_a_jittery_shape_runs_its_whole_budget_in_batches():
    backend = Counting([0.2, 0.1, 0.2], jitter=0.3)
    r = _loop(backend)
    planned = timing.planned_reps(r["probe"], 3, timing.FULL)
    assert r["reps"] == planned == len(r["base"]) and sum(backend.asked[1:]) == planned
    assert backend.asked[1] == timing.FULL["min_reps"] and set(backend.asked[2:-1]) == {timing.CHUNK}


def test_a_screen_never_stops_early():
    backend = Counting([0.2, 0.1, 0.2], jitter=0.001)
    r = _loop(backend, mode="screen")
    assert backend.asked[1:] == [r["reps"]] and r["reps"] == timing.planned_reps(r["probe"], 2, timing.SCREEN)


def _reply(series_jitter: float, reps: int) -> dict:
    rng = random.Random(1)

    def times(ms):
        return [ms * (1 + series_jitter * rng.random()) for _ in range(reps)]
    return {"reps": reps, "attempts": 1, "probe": [[0.2] * 3, [0.1] * 3],
            "base": times(0.2), "cand": times(0.1), "aa": times(0.2)}


def test_the_judge_refuses_a_reply_stopped_short_without_precision():
    short = timing.FULL["min_reps"]
    assert short < timing.planned_reps([[0.2] * 3, [0.1] * 3], 3, timing.FULL)
    assert J.claimed_times(_reply(0.001, short), "full")["reps"] == short  # precise: allowed
    with pytest.raises(RunnerFailed, match="short of its repetition budget"):
        J.claimed_times(_reply(0.3, short), "full")  # as jittery, stopped where it liked
    full = timing.planned_reps([[0.2] * 3, [0.1] * 3], 3, timing.FULL)
    assert J.claimed_times(_reply(0.3, full), "full")["reps"] == full  # its whole budget: no precision needed
