"""What the judge checks of the runner's timing claims (a mixin of session.Session).

The runner runs the interleaved loop (timing.time_loop) and returns raw per-call times; the judge
computes every statistic from them itself (timing.time_candidate) after three checks:
  (a) the sum of the reported per-call times of a request is not more than the judge's own wall
      clock of that request (per-call times exclude the flush and spin, so honest sums are below);
  (b) the judge has the base timed by a process the candidate never ran in (its oracle, which
      holds the base: oracle.py), on the same inputs with the same backend method, while the
      runner is stopped, and rejects a reported base median above that one beyond BASE_TOLERANCE
      (an inflated base would inflate the speedup);
  (c) in full timing, a throughput audit: AUDIT_SETS fresh input sets, never seen by the runner,
      run back to back; every output is checked, and a wall clock the claimed candidate time
      cannot explain (beyond a per-call host floor and a transfer allowance) is rejected. It runs
      only where it can bite: where AUDIT_SETS calls of the base outlast the allowance.
Rejections are `forged_timing`; a malformed reply is `protocol`. docs/security.md says what slack
remains.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.input_cache import fresh_copy
from kernelsmith.referee.link.errors import CandidateError, RunnerFailed
from kernelsmith.referee.link.shared_region import room_for
from kernelsmith.referee.memory import DeviceMemoryShort, device_oom, region_growth

if TYPE_CHECKING:
    from kernelsmith.referee.timing.ab import ShapeTiming

BASE_TOLERANCE = 1.25  # reported base median / the judge's own, above this (plus the slack): forged
BASE_SLACK_MS = 0.003
BASE_REPS = 20
# Requests per shape before a base above the judge's own is called forged. On a loaded host (13
# compile processes on 16 cores) an honest runner's base came back ~40 us slow per call, a
# stalled launch timed with the kernel (H200: 0.05 ms against the judge's 0.005 on fused_rmsnorm's
# 1-token shape, 0.19 against 0.15 on the sampler); a retake is checked the same way, and only the
# reply that passes is used, so a runner that inflates on some requests gains nothing.
BASE_TAKES = 2
AUDIT_SETS = 8
AUDIT_SLACK = 3.0  # the audited wall clock may be this many times the claimed candidate time ...
HOST_SLACK = 4.0  # ... or this many times the judge's own host time per base call, whichever is more
AUDIT_FIXED_MS = 5.0  # + messages, process wake-ups
AUDIT_COPY_GBS = 2.0  # + the inputs and outputs through shared memory, at this (low) rate


def _median(xs) -> float:
    return float(np.median(np.asarray(xs)))


def _times(value, n: int | None, what: str) -> list[float]:
    ok = isinstance(value, list) and value and (n is None or len(value) == n) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in value)
    if not ok:
        raise RunnerFailed("protocol", f"the runner's {what} times are malformed")
    return [float(x) for x in value]


def claimed_times(reply: dict, mode: str, at: tuple[int, int, int] = (0, 0, 0)) -> dict:
    """The runner's timing reply, validated, with the A/A ratio, its CI and noise recomputed here;
    `at`: (seed, candidate id, shape index), which seed the CI's bootstrap as the runner's own."""
    from kernelsmith.referee.timing.ab import (
        FULL,
        RETAKES,
        SCREEN,
        aa_control,
        aa_seed,
        aa_strayed,
        planned_reps,
        precise,
    )

    cfg = FULL if mode == "full" else SCREEN
    reps, attempts = reply.get("reps"), reply.get("attempts")
    if not (isinstance(reps, int) and cfg["min_reps"] <= reps <= cfg["max_reps"]
            and isinstance(attempts, int) and 1 <= attempts <= RETAKES + 1):
        raise RunnerFailed("protocol", "the runner's repetition counts are out of range")
    r = {"base": _times(reply.get("base"), reps, "base"), "reps": reps, "attempts": attempts,
         "cand": _times(reply.get("cand"), reps, "candidate")}
    probe = reply.get("probe")
    if not (isinstance(probe, list) and len(probe) == 2):
        raise RunnerFailed("protocol", "the runner's probe times are malformed")
    r["probe"] = [_times(p, None, "probe") for p in probe]
    r["aa_ratio"] = r["aa_ci95"] = None
    if mode == "full":
        aa = _times(reply.get("aa"), reps, "A/A")
        r["aa"] = aa
        r["aa_ratio"], r["aa_ci95"] = aa_control(r["base"], aa, aa_seed(*at, attempts - 1))
    r["noisy"] = aa_strayed(r["aa_ratio"], r["aa_ci95"])
    series = [r["base"], r["cand"]] + ([r["aa"]] if mode == "full" else [])
    short = cfg["precision"] and reps < planned_reps(r["probe"], len(series), cfg)
    if short and not precise(series, cfg["precision"]):
        # Stopping is allowed only where the times themselves show the ratios known (timing.precise):
        # a runner cannot stop a measurement at a moment that happens to favour the candidate.
        raise RunnerFailed("protocol", "the runner stopped timing short of its repetition budget "
                                       "without the precision that allows it")
    for key in ("host_base", "host_cand"):
        if reply.get(key) is not None:
            r[key] = _times([reply[key]], 1, "host")[0]
    late = reply.get("late_reps")
    if late is not None:
        if not (isinstance(late, list) and len(late) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 4 * reps for n in late)):
            raise RunnerFailed("protocol", "the runner's count of late repetitions is malformed")
        r["late_reps"] = late
    return r


def sum_exceeds_wall(r: dict, wall_ms: float, host_calls: int) -> str | None:
    """Check (a): a message when the reported times add up to more than the judge's wall clock."""
    total = sum(r["base"]) + sum(r["cand"]) + sum(r.get("aa") or []) + sum(sum(p) for p in r["probe"])
    total += 3 * host_calls * (r.get("host_base", 0.0) + r.get("host_cand", 0.0))
    if total > wall_ms:
        return (f"the reported per-call times add up to {total:.3f} ms, more than the judge's own wall "
                f"clock of the whole request ({wall_ms:.3f} ms)")
    return None


def base_disagrees(reported: list[float], own_ms: float) -> str | None:
    """Check (b): a message when the runner's base median is above the judge's own beyond tolerance."""
    med = _median(reported)
    if med > own_ms * BASE_TOLERANCE + BASE_SLACK_MS:
        # Not only forgery: a candidate that slows whatever runs next to it (their calls alternate)
        # gives the same reply; the H200 saw two launch configs kernelsmith rendered do it.
        return (f"the runner reports the base at {med:.4f} ms per call; the judge measures it at "
                f"{own_ms:.4f} ms (tolerance x{BASE_TOLERANCE}): the runner's times are false, or "
                "this candidate slows the base timed in turn with it; either way they cannot be used")
    return None


def audit_allowance_ms(nbytes: int) -> float:
    """What the audit's wall clock may spend beyond the calls: messages, wake-ups, copies."""
    return AUDIT_FIXED_MS + nbytes / (AUDIT_COPY_GBS * 1e9) * 1e3


def audit_can_bite(base_ms: float, nbytes: int, k: int = AUDIT_SETS) -> bool:
    """Whether a candidate as slow as the base could fail check (c) at all: k base calls take
    longer than the allowance. Elsewhere the audit is skipped (it costs k reference calls)."""
    return k * base_ms > audit_allowance_ms(nbytes)


def audit_unsupported(wall_ms: float, claimed_ms: float, host_ms: float, nbytes: int, k: int) -> str | None:
    """Check (c): a message when k back-to-back calls took longer than the claim can explain."""
    allowance = audit_allowance_ms(nbytes)
    per_call = max(AUDIT_SLACK * claimed_ms, HOST_SLACK * host_ms)
    if wall_ms > allowance + k * per_call:
        most = allowance + k * per_call
        return (f"{k} back-to-back calls on fresh inputs took {wall_ms:.3f} ms of the judge's wall clock; "
                f"the claimed {claimed_ms:.4f} ms per call explains at most {most:.3f} ms")
    return None


def time_base(backend, base_fn, inplace_names, originals: list[dict], seed: int,
              compiles) -> tuple[float, float]:
    """(median device ms, host ms per call) of `base_fn` on copies of `originals`, with `backend`'s
    method; `compiles()`: the context its warm-up compiles in (the private base cache)."""
    sets = [fresh_copy(s) for s in originals]
    inplace = [n for n in inplace_names if isinstance(originals[0].get(n), torch.Tensor)]

    def run(r):
        base_fn(**sets[r % len(sets)])
    if inplace:
        def prepare(r):
            for name in inplace:
                sets[r % len(sets)][name].copy_(originals[r % len(sets)][name])
        run.prepare = prepare
    with compiles():
        for r in range(len(sets)):
            run(r)
    backend.synchronize()
    times = backend.time_calls([run], BASE_REPS, C.derive_seed(seed, "judge-base"))[0]
    return _median(times), backend.host_time(run, 5)


class JudgeTiming:
    """The judge's timing of one shape through its runner (Session supplies link, backend, cache)."""

    @property
    def own_base(self) -> dict:
        """(shape key, seed) -> (median device ms, host ms per call) of the judge's own base."""
        if not hasattr(self, "_own_base"):
            self._own_base = {}
        return self._own_base

    def time_shape(self, fn, shape: dict, si: int, cid: int, seed: int, mode: str,
                   host: bool = True) -> ShapeTiming:
        """Have the runner time base, candidate (and A/A); check its claims; the raw times back."""
        from kernelsmith.referee.timing.ab import ShapeTiming

        for _ in range(BASE_TAKES):
            r = self._claims_in_memory(fn, shape, si, cid, seed, mode, host)
            if r.get("forged"):
                return ShapeTiming.refused(*r["forged"])
            why = base_disagrees(r["base"], r["judge_base_ms"])
            if not why:
                break
        else:
            return ShapeTiming.refused("forged_timing", why + self.disagreement_facts(r, seed))
        set_bytes = sum(t.numel() * t.element_size() for t in C.tensors_of(r["originals"][0]).values())
        own_ms, host_ms = r["judge_base_ms"], r["judge_host_ms"]
        if mode == "full" and r["timed_output_ok"] and audit_can_bite(own_ms, 2 * AUDIT_SETS * set_bytes):
            why = self.audit(shape, si, cid, seed, _median(r["cand"]), host_ms)
            if why:
                return ShapeTiming.refused(*why)
        return ShapeTiming.of(r)

    def _claims_in_memory(self, fn, shape: dict, si: int, cid: int, seed: int, mode: str,
                          host: bool) -> dict:
        """`_claims` with as many copies of the input sets as the free device memory allows
        (memory.py); a request the device runs out of memory in is made again with one copy fewer,
        and where one copy of every set does not fit, with one input set fewer (down to one)."""
        from kernelsmith.referee.timing.ab import INPUT_SETS

        planner = getattr(self, "memory", None)
        n_fns = 3 if mode == "full" else 2
        if planner is None:
            entries = self.timing_entries(shape, seed, INPUT_SETS)
            self.listed_expected(entries[0])
            return self._with_own_base(self._claims(fn, shape, si, cid, seed, mode, host, entries, None),
                                       shape, entries, seed)
        n_sets = planner.timing_sets(shape, seed, INPUT_SETS)
        while True:
            entries = self.timing_entries(shape, seed, n_sets)
            self.listed_expected(entries[0])  # the outputs' size is part of the need
            try:
                r = self._claims_with_copies(fn, shape, si, cid, seed, mode, host, entries, n_fns)
                break
            except DeviceMemoryShort as short:
                if n_sets <= 1:
                    raise
                # Sets of this size rotate for nothing but cached results (an input set far larger
                # than any cache is read from memory whichever comes): fewer of them, not no timing.
                n_sets = planner.fewer_sets(shape, seed, n_sets, short.need, short.free)
        return self._with_own_base(r, shape, entries, seed)

    def _claims_with_copies(self, fn, shape: dict, si: int, cid: int, seed: int, mode: str, host: bool,
                            entries: list, n_fns: int) -> dict:
        """`_claims` on `entries` with the rotation copies that fit; DeviceMemoryShort where even one
        does not."""
        planner = self.memory
        # The oracle's regions are idle while the runner times, once the base is timed here.
        idle = self.idle_while("runner") if (json.dumps(shape, sort_keys=True), seed) in self.own_base else ()
        copies = planner.timing_copies(shape, seed, lambda c: self.timing_need(shape, seed, c, entries),
                                       n_fns, keep=[e.key for e in entries], idle=idle)
        while True:
            try:
                return self._claims(fn, shape, si, cid, seed, mode, host, entries, copies)
            except CandidateError as e:
                if not device_oom(e.text):
                    raise
                fewer = planner.fewer_after_oom(shape, seed, copies)
                if fewer is None:
                    need = self.timing_need(shape, seed, 1, entries)
                    raise DeviceMemoryShort(shape, need, planner.room() or 0, f"timing with one copy of its "
                                            f"{len(entries)} input set(s)", planner.sizes_of(shape)) from None
                copies = fewer

    def _with_own_base(self, r: dict, shape: dict, entries: list, seed: int) -> dict:
        """The runner's checked claims `r` with the judge's own base (`judge_base_ms`, `judge_host_ms`),
        timed once per shape and seed; taken after the runner's reply is let go of (its outputs
        are no more of the judge's device memory while the oracle times)."""
        if r.get("forged"):
            return r
        key = (json.dumps(shape, sort_keys=True), seed)
        if key not in self.own_base:  # the base does not change: measured once per shape and seed
            self.own_base[key] = self._own_base_in_memory(shape, entries, seed)
        r["judge_base_ms"], r["judge_host_ms"] = self.own_base[key]
        return r

    def timing_need(self, shape: dict, seed: int, copies: int, entries: list) -> int:
        """Device bytes a timing of `shape` with `copies` copies needs beyond the cache: the runner's
        side, or the oracle's timing of the base where this worker has not timed it yet, and the
        judge's regions they grow."""
        sizes = self.memory.sizes_of(shape) or entries[0].sizes(self.harness.outputs is None)
        sets = len(entries) * sizes.inputs
        need = sizes.timing(copies, len(entries)) + region_growth(self.link, sets, sizes.outputs)
        if (json.dumps(shape, sort_keys=True), seed) not in self.own_base:
            grow = region_growth(getattr(self, "oracle", None), sets)
            need = max(need, sizes.base_timing(len(entries)) + grow)
        return need

    def _claims(self, fn, shape: dict, si: int, cid: int, seed: int, mode: str, host: bool,
                entries: list, copies: int | None) -> dict:
        """One timing request to the runner and checks (a) and the output's; the claims, or
        {"forged": [violation, why]}."""
        from kernelsmith.referee.timing.ab import (
            FULL,
            SCREEN,
            changed_inputs_message,
            timed_output_ok,
        )

        originals = [e.originals for e in entries]
        first = self.listed_expected(entries[0])
        start = time.perf_counter()
        reply, out = self.link.request({"op": "time", "fn": fn.name, "si": si, "cid": cid, "seed": seed,
                                        "mode": mode, "host": host, "copies": copies}, originals,
                                       reply_bytes=room_for(first),
                                       pin=[t for o in originals for t in C.tensors_of(o).values()])
        wall_ms = (time.perf_counter() - start) * 1e3
        r = claimed_times(reply, mode, (seed, cid, si))
        cfg = FULL if mode == "full" else SCREEN
        why = sum_exceeds_wall(r, wall_ms, cfg["host_calls"] if host else 0)
        if why:
            return {"forged": ["forged_timing", why]}
        changed = reply.get("changed_inputs")
        if not (isinstance(changed, list) and all(isinstance(n, str) for n in changed)):
            raise RunnerFailed("protocol", "the runner did not say whether the shared inputs changed")
        if changed:  # the runner's own check; a lying runner is bounded by (b) as for any base it times
            return {"forged": ["input_mutation", changed_inputs_message(changed[:8])]}
        last, k = (out or {}).get("last") if isinstance(out, dict) else None, reply.get("last_set")
        if not (isinstance(last, tuple) and isinstance(k, int) and 0 <= k < len(entries)):
            raise RunnerFailed("protocol", "the runner did not return its last timed output")
        r["timed_output_ok"] = timed_output_ok(self, last, self.listed_expected(entries[k]))
        r["originals"] = originals
        return r

    def _own_base_in_memory(self, shape: dict, entries: list, seed: int) -> tuple[float, float]:
        """`own_base_ms` on the timing sets, with room made for the oracle's copies (memory.py)."""
        originals = [e.originals for e in entries]
        planner = getattr(self, "memory", None)
        if planner is None:
            return self.own_base_ms(originals, seed)
        sizes = planner.sizes_of(shape) or entries[0].sizes(self.harness.outputs is None)
        need = sizes.base_timing(len(entries)) + region_growth(getattr(self, "oracle", None),
                                                               len(entries) * sizes.inputs)
        return self.with_room(shape, need, [e.key for e in entries], "the judge's own timing of the base",
                              lambda: self.own_base_ms(originals, seed), keep_outputs=False,
                              idle=self.idle_while("oracle"))

    def disagreement_facts(self, r: dict, seed: int) -> str:
        """What tells a lying runner from a disturbed device, for the refusal's message: the runner's
        base samples and late repetitions, and the judge's own base timed again now. Honest
        candidates of LMDeploy rms_norm were refused so on the H200 (13 of 422 in a sweep, on shapes
        of 5-35 us) before late repetitions were timed again (event_timing.py)."""
        now_ms = self.own_base_ms(r["originals"], seed)[0]
        own_late = self.own_late
        base, late = r["base"], r.get("late_reps") or [0, 0]
        return (f" [runner's base samples {min(base):.4f}-{max(base):.4f} ms over {len(base)}, its "
                f"candidate's median {_median(r['cand']):.4f} ms, late repetitions it timed again / "
                f"kept: {late[0]} / {late[1]}; the judge's own base timed again now: {now_ms:.4f} ms "
                f"({own_late[0]} / {own_late[1]})]")

    def own_base_ms(self, originals: list[dict], seed: int) -> tuple[float, float]:
        """(median device ms, host ms per call) of the judge's own base on copies of `originals`,
        timed with the backend's method while the runner is stopped."""
        self.link.pause()
        try:
            ms, host_ms, self.own_late = self.base_timing(originals, seed)
        finally:
            self.link.resume()
        return ms, host_ms

    def base_timing(self, originals: list[dict], seed: int) -> tuple[float, float, list[int]]:
        """(median device ms, host ms per call, late repetitions) of the trusted base, timed here
        (the judge's Session asks its oracle instead: the base is target code)."""
        before = self.backend.late_reps()
        ms, host_ms = time_base(self.backend, self.base_fn, self.harness.inplace, originals, seed,
                                self.base_compiles)
        return ms, host_ms, self.backend.late_since(before)

    def audit(self, shape: dict, si: int, cid: int, seed: int, claimed_ms: float, host_ms: float):
        """Check (c) on AUDIT_SETS fresh input sets; [reason, message] on a failure, else None."""
        from kernelsmith.referee.timing.ab import timed_output_ok

        sets, expected = [], []
        for j in range(AUDIT_SETS):
            inputs = self.harness.make_inputs(shape, self.dev, C.derive_seed(seed, cid, si, "audit", j))
            expected.append(self.expected(inputs))
            sets.append(inputs)
        nbytes = sum(t.numel() * t.element_size() for s in sets for t in C.tensors_of(s).values())
        self.backend.synchronize()
        start = time.perf_counter()
        room = room_for([o for e in expected for o in e])
        _, out = self.link.request({"op": "audit"}, sets, reply_bytes=room)
        wall_ms = (time.perf_counter() - start) * 1e3
        outs = out.get("outs") if isinstance(out, dict) else None
        if not (isinstance(outs, list) and len(outs) == AUDIT_SETS
                and all(isinstance(o, tuple) for o in outs)):
            raise RunnerFailed("protocol", "the runner's audit reply is malformed")
        if not all(timed_output_ok(self, o, e) for o, e in zip(outs, expected, strict=True)):
            return ["cached_result", "an audited call's output is wrong for its fresh inputs"]
        why = audit_unsupported(wall_ms, claimed_ms, host_ms, 2 * nbytes, AUDIT_SETS)
        return ["forged_timing", why] if why else None
