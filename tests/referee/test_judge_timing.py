"""The judge's checks of the runner's timing claims (timing/claims.py), driven by a synthetic backend
and a stand-in runner in this process: honest claims pass with the same numbers as before, a sum
above the judge's wall clock, an inflated base and a throughput the wall clock cannot support are
`forged_timing`, a malformed reply is `protocol`. Real numbers come from the H200 step."""

import re
import time

import pytest
import torch
from test_timing_logic import FakeBackend, FakeSession, _rms, _verdict_dict

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.link.errors import RunnerFailed
from kernelsmith.referee.proc.judge import RemoteFn
from kernelsmith.referee.timing import ab as timing
from kernelsmith.referee.timing import claims as J
from kernelsmith.referee.timing.claims import JudgeTiming


class TakesItsTime(FakeBackend):
    """FakeBackend whose scripted times really pass, plus the untimed flush and spin around each
    call (as on CUDA, where per-call times exclude them)."""

    FLUSH_AND_SPIN_MS = 0.3

    def time_calls(self, fns, reps, order_seed):
        out = super().time_calls(fns, reps, order_seed)
        time.sleep((sum(map(sum, out)) + self.FLUSH_AND_SPIN_MS * reps * len(fns)) / 1e3)
        return out

    def host_time(self, fn, calls):
        ms = super().host_time(fn, calls)
        time.sleep(ms * calls / 1e3)
        return ms


class StandInRunner:
    """Answers the judge's "time" and "audit" requests as the runner does (timing.time_loop), with
    a hook that rewrites its reply (a forging runner) and an optional delay per audited call."""

    def __init__(self, session, cand, forge=None, audit_delay_s: float = 0.0):
        self.session, self.cand, self.forge, self.audit_delay_s = session, cand, forge, audit_delay_s
        self.paused = 0

    def request(self, msg, values=None, reply_bytes=0, pin=()):
        if msg["op"] == "time":
            r = timing.time_loop(self.session, self.cand, values, msg["si"], msg["cid"], msg["seed"],
                                 msg["mode"], msg["host"], msg.get("copies"))
            last = r.pop("last_outs")
            reply = {"ok": True, **r}
            if self.forge:
                self.forge(reply)
            return reply, {"last": last}
        if msg["op"] == "audit":
            outs = []
            for s in values:
                outs.append(C.as_tuple(self.cand(**s)))
                time.sleep(self.audit_delay_s)
            return {"ok": True}, {"outs": outs}
        raise AssertionError(msg)

    def pause(self):
        self.paused += 1

    def resume(self):
        pass


class Judge(FakeSession, JudgeTiming):
    """The judge's side: FakeSession's cache and base, JudgeTiming's checks, a stand-in runner."""

    def __init__(self, backend, runner_backend=None, **runner):
        """`backend`: the judge's (its own base timing); the runner's scripted times really pass."""
        super().__init__(backend)
        self.link = StandInRunner(FakeSession(runner_backend or TakesItsTime(backend.ms)), _rms, **runner)


@pytest.fixture(autouse=True)
def _few_reps(monkeypatch):
    monkeypatch.setitem(timing.FULL, "min_reps", 12)
    monkeypatch.setitem(timing.FULL, "max_reps", 12)
    monkeypatch.setitem(timing.FULL, "host_calls", 3)


def _time(judge, mode="full"):
    out = _verdict_dict(judge)
    ok = timing.time_candidate(judge, RemoteFn("cand"), cid=1, seed=0, mode=mode, out=out)
    return ok, out


def test_honest_claims_give_the_same_numbers_as_timing_in_one_process():
    judge = Judge(FakeBackend([0.2, 0.1, 0.2]))
    ok, out = _time(judge)
    assert ok and out["violations"] == [] and out["timed"]
    assert all(abs(sh["judge_base_ms"] - 0.2) < 0.01 for sh in out["shapes"])
    same = FakeSession(FakeBackend([0.2, 0.1, 0.2]))
    ref = _verdict_dict(same)
    timing.time_candidate(same, _rms, cid=1, seed=0, mode="full", out=ref)
    assert abs(out["geomean_speedup"] - ref["geomean_speedup"]) < 0.01
    assert judge.link.paused == len(out["shapes"])  # the runner was stopped while the judge timed the base
    assert all(sh["reps"] == 12 and sh["ci95"][0] <= sh["speedup"] for sh in out["shapes"])


def test_times_that_add_up_to_more_than_the_judges_wall_clock_are_forged():
    def slow_claims(reply):  # every call "took" a second: the request took milliseconds
        for key in ("base", "cand", "aa"):
            reply[key] = [1000.0] * len(reply[key])
        reply["cand"] = [500.0] * len(reply["cand"])
    ok, out = _time(Judge(FakeBackend([0.2, 0.1, 0.2]), forge=slow_claims))
    assert not ok and out["violations"] == ["forged_timing"], out
    assert "wall clock" in out["details"]["messages"][0]


def test_an_inflated_base_is_forged():
    def inflate(reply):  # within the wall clock (the flush and spin leave room), above the judge's own
        reply["base"] = [t * 1.5 for t in reply["base"]]
        reply["aa"] = [t * 1.5 for t in reply["aa"]]  # the A/A control agrees with the lie
    judge = Judge(FakeBackend([0.2, 0.1, 0.2]), forge=inflate)
    ok, out = _time(judge)
    assert not ok and out["violations"] == ["forged_timing"]
    message = out["details"]["messages"][0]
    assert "the judge measures it" in message
    # The facts that tell a lying runner from a disturbed device: the runner's samples (inflated
    # 1.5x) and the judge's own base timed again at refusal, with the runner stopped.
    facts = re.search(r"runner's base samples ([\d.]+)-([\d.]+) ms over (\d+), its candidate's median "
                      r"([\d.]+) ms, late repetitions it timed again / kept: (\d+) / (\d+); the judge's "
                      r"own base timed again now: ([\d.]+) ms \((\d+) / (\d+)\)", message)
    assert facts, message
    lo, hi, n, cand, retimed, kept, now, own_retimed, own_kept = map(float, facts.groups())
    assert (retimed, kept, own_retimed, own_kept) == (0, 0, 0, 0)  # FakeBackend queues nothing late
    assert lo == pytest.approx(0.3, rel=0.01) and hi == pytest.approx(0.3, rel=0.01) and n == 12
    assert cand == pytest.approx(0.1, rel=0.01) and now == pytest.approx(0.2, rel=0.01)
    assert judge.link.paused == 2  # once for the shape's own base, once again at the refusal


def test_a_base_slowed_once_by_host_contention_is_retaken_not_forged():
    """H200: with 13 compile processes on 16 cores an honest runner's base came back ~40 us slow per
    call once in a while (0.05 ms against the judge's 0.005). The first such reply of a shape is
    retaken; the retake passes and is the one used. A runner that inflates every time stays forged."""
    takes: dict[int, int] = {}

    def first_take_slow(reply):
        si = reply["si"]
        takes[si] = takes.get(si, 0) + 1
        if takes[si] == 1:
            reply["base"] = [t + 0.04 * 10 for t in reply["base"]]

    judge = Judge(FakeBackend([0.02, 0.01, 0.02]), runner_backend=TakesItsTime([0.02, 0.01, 0.02]))
    real = judge.link.request
    judge.link.request = lambda msg, values=None, **kw: _tagged(real(msg, values, **kw), msg, first_take_slow)
    ok, out = _time(judge)
    assert ok and out["violations"] == [], out
    assert takes and all(n == J.BASE_TAKES for n in takes.values())  # every shape: one retake
    assert all(sh["judge_base_ms"] == pytest.approx(0.02, rel=0.1) for sh in out["shapes"])
    assert all(sh["speedup"] == pytest.approx(2.0, rel=0.1) for sh in out["shapes"])  # the retake's numbers

    def always_slow(reply):
        reply["base"] = [t + 0.4 for t in reply["base"]]

    ok, out = _time(Judge(FakeBackend([0.02, 0.01, 0.02]), forge=always_slow))
    assert not ok and out["violations"] == ["forged_timing"]


def _tagged(answer, msg, forge):
    """Apply `forge` to a "time" reply, which it can tell apart by the shape index it carries."""
    reply, out = answer
    if msg["op"] == "time":
        reply["si"] = msg["si"]
        forge(reply)
    return reply, out


@pytest.fixture
def audit_bites(monkeypatch):
    """A 5 ms allowance (the default): AUDIT_SETS calls of a 2 ms base outlast it, so the audit runs."""
    monkeypatch.setattr(J, "AUDIT_FIXED_MS", 5.0)


def test_an_honest_claim_passes_the_audit(audit_bites):
    judge = Judge(FakeBackend([2.0, 1.0, 2.0]), audit_delay_s=0.001)  # audited calls take what they claim
    calls = []
    real = judge.link.request
    judge.link.request = lambda msg, values=None, **kw: calls.append(msg["op"]) or real(msg, values, **kw)
    ok, out = _time(judge)
    assert ok and out["violations"] == [] and calls.count("audit") == len(out["shapes"])


def test_a_claim_the_audit_wall_clock_cannot_support_is_forged(audit_bites):
    # Claims 1 ms per call; each audited call really takes 30 ms (a GPU-bound block).
    ok, out = _time(Judge(FakeBackend([2.0, 1.0, 2.0]), audit_delay_s=0.03))
    assert not ok and out["violations"] == ["forged_timing"]
    assert "back-to-back" in out["details"]["messages"][0]
    # Screen timing (the search's first look) runs no audit.
    ok, out = _time(Judge(FakeBackend([2.0, 1.0]), audit_delay_s=0.03), mode="screen")
    assert ok and out["violations"] == []


def test_the_audit_is_skipped_where_it_cannot_bite():
    """Small kernels: AUDIT_SETS base calls are far below the allowance, so no fresh sets are made."""
    judge = Judge(FakeBackend([0.2, 0.1, 0.2]), audit_delay_s=0.03)  # would fail if audited
    ok, out = _time(judge)
    assert ok and out["violations"] == []
    assert not J.audit_can_bite(0.2, 1 << 20) and J.audit_can_bite(10.0, 1 << 20)


def test_audit_rule_keeps_host_bound_small_kernels():
    # 5 us of device time per call, 40 us of launch cost: k calls take k*40 us, far above 3*5 us,
    # yet within HOST_SLACK times the base's own host time: not a forgery.
    assert J.audit_unsupported(wall_ms=J.AUDIT_SETS * 0.04 + 1.0, claimed_ms=0.005, host_ms=0.03,
                               nbytes=1 << 20, k=J.AUDIT_SETS) is None
    assert J.audit_unsupported(wall_ms=500.0, claimed_ms=1.0, host_ms=0.03, nbytes=1 << 20, k=4)
    assert J.base_disagrees([0.1] * 5, own_ms=0.1) is None
    why = J.base_disagrees([0.2] * 5, own_ms=0.1)
    # The message names both causes: a forged reply, or a candidate that slows the base beside it.
    assert "0.2000 ms" in why and "0.1000 ms" in why and "slows the base timed in turn with it" in why


def test_an_audited_wrong_output_is_caught(audit_bites):
    judge = Judge(FakeBackend([2.0, 1.0, 2.0]))
    honest = judge.link.request

    def wrong_on_fresh_inputs(msg, values=None, **kw):  # zeros on the audit's sets only
        if msg["op"] == "audit":
            return {"ok": True}, {"outs": [(torch.zeros_like(s["x"]),) for s in values]}
        return honest(msg, values)
    judge.link.request = wrong_on_fresh_inputs
    ok, out = _time(judge)
    assert not ok and out["violations"] == ["cached_result"]


@pytest.mark.parametrize("bad", [
    lambda r: r.update(reps=10_000), lambda r: r.update(base=[0.1]), lambda r: r.update(cand=["x"] * 12),
    lambda r: r.update(aa=None), lambda r: r.update(base=[float("nan")] * 12), lambda r: r.pop("probe"),
    lambda r: r.update(late_reps=[-1, 0]), lambda r: r.update(late_reps=[1]),
    lambda r: r.update(late_reps=["1", 0]), lambda r: r.update(late_reps=[10**9, 0]),
    lambda r: r.pop("changed_inputs"), lambda r: r.update(changed_inputs=[1])])
def test_a_malformed_timing_reply_is_a_protocol_failure(bad):
    with pytest.raises(RunnerFailed) as e:
        _time(Judge(FakeBackend([0.2, 0.1, 0.2]), forge=bad))
    assert e.value.reason == "protocol"


def test_the_judge_recomputes_the_aa_control_and_its_ci_from_the_raw_times():
    """The runner's own "noisy" and "aa_ratio" are never read: a steady 3% A/A offset is noisy
    whatever the reply says, and a 1.2% offset inside a jittery kernel's sampling noise is not."""
    import random

    rng = random.Random(0)
    reps = timing.FULL["min_reps"]
    steady = {"reps": reps, "attempts": 1, "probe": [[0.01], [0.01]], "noisy": False, "aa_ratio": 1.0,
              "base": [0.0103] * reps, "cand": [0.01] * reps, "aa": [0.01] * reps}
    r = J.claimed_times(steady, "full", (1, 0, 0))
    assert r["noisy"] is True and r["aa_ratio"] == pytest.approx(1.03) and r["aa_ci95"][0] > 1.0

    def jittery(scale):
        return [0.005 * scale * (1 + 0.3 * rng.random()) for _ in range(reps)]

    noisy_looking = {**steady, "base": jittery(1.012), "cand": jittery(1.0), "aa": jittery(1.0),
                     "noisy": True}
    r = J.claimed_times(noisy_looking, "full", (1, 0, 0))
    lo, hi = r["aa_ci95"]
    assert abs(r["aa_ratio"] - 1) > timing.AA_LIMIT and lo <= 1.0 <= hi and r["noisy"] is False


def test_the_judge_draws_the_runners_aa_resamples_so_their_calls_agree():
    """The runner retakes while its A/A control strays; the judge recomputes the last take with the
    same bootstrap seed (timing.aa_seed), so a take the runner kept is never flagged by a luckier
    or unluckier resample on the judge's side."""
    s = FakeSession(FakeBackend([0.005, 0.005, 0.005], aa_drift=[1.02] * 10, jitter=0.3))
    shape = s.harness.shapes_for("interpret")[1]
    r = timing.time_loop(s, _rms, [o for o, _ in s.timing_sets(shape, 0, timing.INPUT_SETS)], 1, 7, 0, "full")
    assert r["aa_ci95"] is not None  # past 1%: the CI decided
    judged = J.claimed_times({k: r[k] for k in ("base", "cand", "aa", "reps", "attempts", "probe")}, "full",
                             (0, 7, 1))
    assert judged["aa_ci95"] == r["aa_ci95"] and judged["noisy"] == r["noisy"]


def test_the_runners_count_of_late_repetitions_is_shown_and_decides_nothing():
    """late_reps comes from the runner (candidate code runs there): recorded per shape for
    diagnosis; a runner claiming many late repetitions gets the same verdict as one claiming none."""
    _, plain = _time(Judge(FakeBackend([0.2, 0.1, 0.2])))
    ok, claimed = _time(Judge(FakeBackend([0.2, 0.1, 0.2]), forge=lambda r: r.update(late_reps=[12, 3])))
    assert ok and all(sh["late_reps"] == {"retimed": 12, "kept": 3} for sh in claimed["shapes"])
    assert claimed["geomean_speedup"] == plain["geomean_speedup"]
    assert claimed["violations"] == plain["violations"] == []


def test_shared_inputs_a_candidate_wrote_while_timed_are_an_input_mutation():
    """The timed calls share their read-only inputs (rotation.py): the runner's check after the loop
    reaches the judge, which refuses the measurement."""
    judge = Judge(FakeBackend([0.2, 0.1, 0.2]))
    judge.link.cand = writes_x_once_timed()
    ok, out = _time(judge)
    assert not ok and out["violations"] == ["input_mutation"] and "'x'" in out["details"]["messages"][0]


def writes_x_once_timed():
    """A correct rms_norm that, after its warm-up and probe, adds 1 to its input x after using it."""
    calls = {"n": 0}

    def cand(x, weight, eps):
        y = _rms(x, weight, eps)
        calls["n"] += 1
        if calls["n"] == 2 * timing.INPUT_SETS + 1:
            x.add_(1.0)
        return y
    return cand
