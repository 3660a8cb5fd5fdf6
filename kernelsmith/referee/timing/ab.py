"""A/B timing of base and candidate, interleaved in one process, with an A/A control.

Device time: CUDA events around each call, after an L2 flush and a ~100 µs GPU spin (what a
CUDA-graph serving loop sees). Host time: wall clock per eager call (what an eager caller sees).
Speedups are on device time; each shape's times, base and candidate alike, are floored at the
roofline: no impossible shape can dominate the geomean, and a base that already runs at (or, by the
bandwidth estimate's error, just past) the roofline does not make an equal candidate look slower.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, fields
from statistics import geometric_mean

import numpy as np
import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.timing.rotation import Rotation
from kernelsmith.referee.verdict import shape_timing_fields, timing_block

INPUT_SETS = 3  # inputs change between iterations: a result cached across calls is caught
# The A/A control strays when |aa_ratio - 1| passes AA_LIMIT and its own 95% CI excludes 1.0
# (aa_strayed): then re-take, then report as noisy. The CI term matters on kernels of a few
# microseconds, where per-call jitter (~10%, in 32 ns event ticks) puts the median ratio of 200
# repetitions about 1% from 1.0 by sampling alone: a ±1% rule there flagged an honest copy of the
# base on 1 take in 3 (SGLang fused_rmsnorm at 1 token, H200), which no retake cures.
AA_LIMIT = 0.01
RETAKES = 2
# A strayed A/A control bounds the measurement's bias on its shape. Where the shape's own effect is
# at least AA_DWARFED times that bias (log scale: 1.32x for a 1.4% stray, 2.65x for 5%), the shape's
# CI is widened by the bias (`aa_bias`) instead of the whole measurement being discarded: on the
# H200 LMDeploy's sampler at 1 x 151,936 had its A/A copy 1.4% slower than the base on
# every take of 13 of a run's 20 full measurements, at 9-15x, and no noisy measurement can be a win,
# feed a table or raise the contender bar, so that search never reached 95% of its sweep's best.
# That stray was buffer placement, which rotation.py spreads over every function (0 strays
# in 27 such measurements since); the bound stays for whatever else moves one function alone.
AA_DWARFED = 20.0
# A full measurement stops before its repetition budget once every ratio it reports is known to
# within `precision` (the 95% CIs of the medians, combined): on the H200 a shape of 0.1-1 ms has
# that after 30-60 of its 200 repetitions; a few-microsecond shape never does and runs them all.
# Archived full measurements replayed with this rule moved no ratio by more than 0.24%.
FULL = {"min_reps": 30, "max_reps": 200, "budget_ms": 400.0, "host_calls": 50, "precision": 0.0025}
SCREEN = {"min_reps": 8, "max_reps": 12, "budget_ms": 40.0, "host_calls": 0, "precision": None}
CHUNK = 25  # repetitions between two precision checks (the CUDA backend synchronises as often)


def bootstrap_ci(base: list[float], cand: list[float], seed: int, n: int = 1000,
                 floor: float = 0.0) -> list[float]:
    """95% CI of median(base)/median(cand), resampling interleaved (base, cand) pairs; both medians
    floored at `floor` (the roofline time) as the speedup is."""
    b, c = np.asarray(base), np.asarray(cand)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(b), size=(n, len(b)))
    ratios = np.maximum(np.median(b[idx], axis=1), floor) / np.maximum(np.median(c[idx], axis=1), floor)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return [float(lo), float(hi)]


def aa_control(base: list[float], aa: list[float], seed: int) -> tuple[float, list[float] | None]:
    """The A/A ratio median(base) / median(A/A copy) and, where it is past AA_LIMIT, its 95%
    bootstrap CI over the pairs (None within the limit: nothing to decide, and the bootstrap,
    ~8 ms a shape, stays off the path of every full measurement)."""
    ratio = _median(base) / _median(aa)
    return ratio, (bootstrap_ci(base, aa, seed) if abs(ratio - 1) > AA_LIMIT else None)


def aa_bias(ratio: float | None, ci: list[float] | None, speedup: float | None) -> float | None:
    """The factor (> 1) a strayed A/A control puts into the CI of a shape whose effect dwarfs it
    (AA_DWARFED); None where the control did not stray or the effect does not dwarf it."""
    if not aa_strayed(ratio, ci) or not speedup or speedup <= 0:
        return None
    bias = abs(math.log(ratio))
    return math.exp(bias) if abs(math.log(speedup)) >= AA_DWARFED * bias else None


def aa_seed(seed: int, cid: int, si: int, attempt: int) -> int:
    """The A/A bootstrap's seed for one take (0-based) of one shape: the runner deciding a retake and
    the judge recomputing the last take draw the same resamples, so they cannot disagree."""
    return C.derive_seed(seed, cid, si, "aa", attempt)


def aa_strayed(ratio: float | None, ci: list[float] | None) -> bool:
    """Whether an A/A control is evidence of a biased measurement: past AA_LIMIT, and (when its CI
    is known) with 1.0 outside its CI, so sampling noise alone does not explain it."""
    if ratio is None or abs(ratio - 1) <= AA_LIMIT:
        return False
    return ci is None or not ci[0] <= 1.0 <= ci[1]


def median_halfwidth(xs: list[float]) -> float:
    """Half-width of a distribution-free 95% CI of the median (order statistics), relative to it."""
    x = np.sort(np.asarray(xs))
    n = len(x)
    k = max(0, int(n / 2 - 0.98 * math.sqrt(n)))
    m = float(np.median(x))
    return float(x[n - 1 - k] - x[k]) / 2 / m if m > 0 else math.inf


def precise(times: list[list[float]], target: float) -> bool:
    """Whether each ratio against the first series (base / candidate, base / A-A copy) is known to
    within `target`, its two medians' relative CI half-widths combined."""
    w = [median_halfwidth(t) for t in times]
    return all(math.hypot(w[0], wi) <= target for wi in w[1:])


def planned_reps(probe: list[list[float]], n_fns: int, cfg: dict) -> int:
    """The repetitions cfg's time budget buys, from a probe of base and candidate (ms per call)."""
    per_rep = sum(_median(t) for t in probe) + 0.25 * n_fns  # + flush and spin
    return int(min(cfg["max_reps"], max(cfg["min_reps"], cfg["budget_ms"] / max(per_rep, 1e-3))))


def interleaved(backend, fns, reps: int, cfg: dict, order_seed) -> list[list[float]]:
    """`reps` interleaved repetitions, or fewer (never below cfg's minimum) once `precise`;
    `order_seed(k)`: the shuffling seed of the k-th batch of them."""
    first = reps if not cfg["precision"] else min(reps, cfg["min_reps"])
    times, k = backend.time_calls(fns, first, order_seed(0)), 0
    while len(times[0]) < reps and not precise(times, cfg["precision"]):
        k += 1
        more = backend.time_calls(fns, min(CHUNK, reps - len(times[0])), order_seed(k))
        times = [t + m for t, m in zip(times, more, strict=True)]
    return times


def roofline_ms(harness, shape: dict, peak: dict) -> float | None:
    """The least time physics allows: bytes_moved at measured copy bandwidth, flops at matmul rate."""
    best = None
    if harness.bytes_moved and peak.get("bandwidth_gbs"):
        best = harness.bytes_moved(shape) / (peak["bandwidth_gbs"] * 1e9) * 1e3
    if harness.flops and peak.get("tflops"):
        t = harness.flops(shape) / (peak["tflops"] * 1e12) * 1e3
        best = t if best is None else max(best, t)
    return best


def geomean(values: list[float]) -> float | None:
    """Geometric mean of positive values (None when empty)."""
    vals = [v for v in values if v and v > 0]
    return geometric_mean(vals) if vals else None


def _median(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs)))


@dataclass
class ShapeTiming:
    """One shape's interleaved measurement: per-repetition device times of base and candidate."""

    base: list[float]
    cand: list[float]
    aa_ratio: float | None  # median base / median A/A copy (full mode only)
    noisy: bool  # the A/A control strayed (aa_strayed) on every take
    reps: int
    attempts: int
    timed_output_ok: bool | None = None  # the last timed candidate call's output was right (None: unchecked)
    host_base: float | None = None  # eager wall clock per call, ms (full mode, when asked)
    host_cand: float | None = None
    judge_base_ms: float | None = None  # the judge's own median of the base (timing/claims.py, check b)
    forged: list[str] | None = None  # [violation, why]: the judge refused the runner's claims
    aa_ci95: list[float] | None = None  # the A/A ratio's 95% CI (full mode, past AA_LIMIT only)
    late_reps: list[int] | None = None  # [retimed, kept]: reps the host queued late (event_timing.py)

    @classmethod
    def of(cls, r: dict) -> ShapeTiming:
        """From a timing loop's (or the judge's checked) dict; keys it does not name are dropped."""
        return cls(**{f.name: r.get(f.name) for f in fields(cls)})

    @classmethod
    def refused(cls, violation: str, why: str) -> ShapeTiming:
        """No timing: the judge refused what the runner claimed (`violation`, in words `why`)."""
        return cls(base=[], cand=[], aa_ratio=None, noisy=False, reps=0, attempts=0, forged=[violation, why])


def time_shape(session, fn, shape: dict, si: int, cid: int, seed: int, mode: str,
               host: bool = True) -> ShapeTiming:
    """Time base, candidate (and, in full mode, the A/A copy) on one shape in this process; `host`:
    also the eager wall clock per call (skipped for search-time contenders: only the final numbers
    report it). The judge's Session has its own `time_shape` (the loop runs in its runner)."""
    # The correctness trials' inputs and reference outputs, from the cache (input_cache.py):
    # never handed to a kernel, only their copies are.
    made = session.timing_sets(shape, seed, INPUT_SETS)
    result = time_loop(session, fn, [o for o, _ in made], si, cid, seed, mode, host)
    if result["changed_inputs"]:
        return ShapeTiming.refused("input_mutation", changed_inputs_message(result["changed_inputs"]))
    last = result.pop("last_outs", None)
    if last is not None:
        result["timed_output_ok"] = timed_output_ok(session, last, made[result["last_set"]][1])
    return ShapeTiming.of(result)


def changed_inputs_message(names: list[str]) -> str:
    """Why a measurement is refused when inputs the functions share were written while timed."""
    return (f"input(s) {', '.join(map(repr, names))} were modified while timed (the timed calls share "
            "their read-only inputs, so the base's calls would have read the changed values)")


def timed_output_ok(session, outs: tuple, expected: tuple) -> bool:
    """Whether the last timed candidate call's outputs are right for the inputs it was given."""
    # Values only (dtype and shape were checked against the base already; a float32 reference is fine).
    checks = [C.compare(o, e, session._tol(o), "timed", like=o) if type(o) is torch.Tensor
              else C.Check("incorrect") for o, e in zip(outs, expected, strict=False)]
    return len(outs) == len(expected) and all(c.problem is None for c in checks)


def time_loop(session, fn, originals: list[dict], si: int, cid: int, seed: int, mode: str,
              host: bool = True, copies: int | None = None) -> dict:
    """The interleaved loop on copies of `originals` (INPUT_SETS input sets, fewer where the device
    memory is short): raw per-call times of base, candidate (and A/A), host times, and the last
    timed candidate call's outputs (`last_outs`, on set `last_set`). Runs where the candidate is
    loaded (the runner). `copies`: copies of the sets (rotation.py; default one per function, fewer
    where memory is short)."""
    cfg = FULL if mode == "full" else SCREEN
    h, backend = session.harness, session.backend
    last: dict = {}
    inplace = [n for n in h.inplace if isinstance(originals[0].get(n), torch.Tensor)]
    originals_fns = [session.base_fn, fn] + ([session.aa_fn()] if mode == "full" else [])
    # Each function uses every function's copy of the tensors in turn (rotation.py): where a buffer
    # sat moved an identical call by up to ~1.1% on the H200, on every take.
    rotation = Rotation(originals, len(originals_fns), copies)
    shared = rotation.copies < len(originals_fns)

    def outputs(ret, inputs) -> tuple:
        return C.as_tuple(ret) if h.outputs is None else tuple(inputs[n] for n in h.outputs)

    def runner(j, keep):
        f = originals_fns[j]

        def run(_rep):
            c = rotation.next_copy(j)
            k, inputs = rotation.inputs(j)
            ret = f(**inputs)
            if keep:
                last.clear()
                last.update(ret=ret, set=k, inputs=inputs, copy=c)
        if inplace or shared:
            def prepare(_rep):
                # Outside the timed window (backend.time_calls). Where calls share copies, the
                # candidate's last output is cloned before another call writes its copy.
                if shared and not keep and "outs" not in last and last.get("copy") == rotation.next_copy(j):
                    last["outs"] = tuple(o.clone() if isinstance(o, torch.Tensor) else o
                                         for o in outputs(last["ret"], last["inputs"]))
                # Every timed call starts from the trial's own in-place buffers, so a kernel that
                # skips work on an already-filled cache gains nothing, and the last call's output
                # can be checked.
                k, dst = rotation.peek(j)
                for name in inplace:
                    dst[name].copy_(originals[k][name])
            run.prepare = prepare
        return run

    fns = [runner(j, j == 1) for j in range(len(originals_fns))]
    for f, orig in zip(fns, originals_fns, strict=True):  # warm-up: compile, autotune, fill caches
        # Base and A/A compile only in the private Triton cache (compile_cache.py); the switch
        # happens here, around the warm-up, never inside a timed region.
        with session.base_compiles() if session.trusted(orig) else nullcontext():
            for r in range(len(originals)):
                f(r)
    backend.synchronize()
    late_before = backend.late_reps()
    probe = backend.time_calls(fns[:2], 3, seed)
    rotation.align()
    reps = planned_reps(probe, len(fns), cfg)
    attempts = 0
    while True:
        # Batch 0 keeps the seed a take had before batches existed.
        times = interleaved(backend, fns, reps, cfg, lambda k, a=attempts: C.derive_seed(
            seed, cid, si, "order", a, *([k] if k else [])))
        aa, aa_ci = (aa_control(times[0], times[2], aa_seed(seed, cid, si, attempts))
                     if mode == "full" else (None, None))
        attempts += 1
        if not aa_strayed(aa, aa_ci) or attempts > RETAKES:
            break
    result = {"base": times[0], "cand": times[1], "aa": times[2] if mode == "full" else None,
              "aa_ratio": aa, "aa_ci95": aa_ci, "noisy": aa_strayed(aa, aa_ci), "reps": len(times[0]),
              "attempts": attempts, "probe": probe,
              "late_reps": backend.late_since(late_before)}
    # The output of the last timed candidate call (in-place outputs too: their buffers were
    # restored before that call), for the caller to check against the reference.
    if "set" in last:
        result["last_set"] = last["set"]
        # Cloned before the host timing below: its buffers are other functions' in turn.
        result["last_outs"] = last.get("outs") or tuple(
            o.clone() if isinstance(o, torch.Tensor) else o for o in outputs(last["ret"], last["inputs"]))
    if cfg["host_calls"] and host:
        hb, hc = [], []
        for _ in range(3):
            hb.append(backend.host_time(fns[0], cfg["host_calls"]))
            hc.append(backend.host_time(fns[1], cfg["host_calls"]))
        result["host_base"], result["host_cand"] = _median(hb), _median(hc)
    # The functions shared the read-only inputs: a write by one reached the others' calls.
    result["changed_inputs"] = rotation.changed(originals, h.written)
    return result


def time_candidate(session, fn, cid: int, seed: int, mode: str, out: dict, host: bool = True,
                   indices: list[int] | None = None) -> bool:
    """Fill `out` (the verdict dict) with per-shape timings, the geomean and the A/A control.

    `indices`: time only these listed shapes (default all); the geomean and A/A summary cover
    every shape timed so far in `out`. False when a timed output was wrong (cached_result).
    """
    h = session.harness
    shapes = h.shapes_for(session.device)
    again = mode == "rescreen"  # another screen, pooled with the one `out` holds (staging.near_miss)
    loop_mode = "screen" if again else mode
    for si in (range(len(shapes)) if indices is None else indices):
        shape = shapes[si]
        own = getattr(session, "time_shape", None)  # the judge's: the loop runs in its runner
        if own is not None:
            r = own(fn, shape, si, cid, seed, loop_mode, host)
        else:
            r = time_shape(session, fn, shape, si, cid, seed, loop_mode, host)
        if r.forged:
            out["violations"].append(r.forged[0])
            out["details"]["messages"].append(f"shape {shape}: {r.forged[1]}")
            return False
        if r.timed_output_ok is False:
            out["violations"].append("cached_result")
            out["details"]["messages"].append(
                f"shape {shape}: the output of a timed call is wrong for its inputs "
                "(results cached across calls)")
            return False
        base, cand, late = pooled(out["shapes"][si], r) if again else (r.base, r.cand, r.late_reps)
        base_ms, cand_ms = _median(base), _median(cand)
        dtype = shape.get("dtype") if isinstance(shape.get("dtype"), str) else None
        roof = roofline_ms(h, shape, session.backend.peak(dtype if h.flops else None))
        floor = roof or 0.0
        speedup = max(base_ms, floor) / max(cand_ms, floor)
        ci = bootstrap_ci(base, cand, C.derive_seed(seed, cid, si, "ci", *(["again"] if again else [])),
                          floor=floor)
        bias = aa_bias(r.aa_ratio, r.aa_ci95, speedup)
        out["shapes"][si].update(shape_timing_fields(
            base_ms=base_ms, cand_ms=cand_ms, speedup=speedup,
            ci95=[ci[0] / bias, ci[1] * bias] if bias else ci, aa_bias=bias,
            host_ms=r.host_cand, base_host_ms=r.host_base, roof_ms=roof, aa_ratio=r.aa_ratio,
            reps=len(base) if again else r.reps, attempts=r.attempts, judge_base_ms=r.judge_base_ms,
            base_samples=base, cand_samples=cand, aa_ci95=r.aa_ci95, late_reps=late))
    conclude(out, loop_mode)
    return True


def pooled(entry: dict, r: ShapeTiming) -> tuple[list[float], list[float], list[int] | None]:
    """Base and candidate samples, and late repetitions, of a shape's earlier screen (`entry`) and of
    `r` together: both screens interleaved base and candidate on the same inputs, so pairs are alike."""
    prev, before = entry.get("samples_ms") or {}, entry.get("late_reps")
    late = None
    if before or r.late_reps:
        now = r.late_reps or [0, 0]
        late = [(before or {}).get("retimed", 0) + now[0], (before or {}).get("kept", 0) + now[1]]
    return list(prev.get("base") or []) + r.base, list(prev.get("candidate") or []) + r.cand, late


def conclude(out: dict, mode: str) -> None:
    """The verdict's geomean and A/A summary over the shapes timed so far (those with a speedup)."""
    timed = [s for s in out["shapes"] if s.get("speedup") is not None]
    aas = [s["aa_ratio"] for s in timed if s.get("aa_ratio") is not None]
    worst = max(aas, key=lambda a: abs(a - 1)) if aas else None
    noisy = any(aa_strayed(s.get("aa_ratio"), s.get("aa_ci95")) and not s.get("aa_bias") for s in timed)
    out["timed"] = True
    out["geomean_speedup"] = geomean([s["speedup"] for s in timed])
    out["timing"] = timing_block(worst, noisy, mode)
    out["details"]["timing_depth"] = mode
