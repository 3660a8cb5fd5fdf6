"""Whether a timed verdict is a measured win: the rule a winner must pass (finish.py).

A win is measured when the geomean's 95% confidence interval lies above 1.0 and no shape is slower
than SLOWEST_SHAPE beyond its own interval. The geomean's interval is a bootstrap over each
shape's interleaved (base, candidate) sample pairs, as the referee's per-shape CI is
(referee/timing/ab.py `bootstrap_ci`): every shape's pairs are resampled, both medians of each
shape floored at the roofline as the speedup itself is, and the geomean over shapes taken.
"""

from __future__ import annotations

import hashlib

import numpy as np

from kernelsmith.referee.verdict import SLOWEST_SHAPE, aa_bias_factor, is_noisy, lost_shapes

__all__ = ["SIMPLER_WITHIN", "SLOWEST_SHAPE", "fragile", "geomean_ci", "ci_seed", "judge"]
RESAMPLES = 1000  # as the referee's per-shape bootstrap_ci
SIMPLER_WITHIN = 0.01  # the winner: the smallest change within this fraction of the fastest finalist


def fragile(shape_speedups) -> bool:
    """Whether a kernel is slower than SLOWEST_SHAPE on some shape by its point estimate (its speedup
    per shape, any iterable): even where its CI only just reached the bar there, a re-measurement on
    new inputs fails it as often as not."""
    return any(s < SLOWEST_SHAPE for s in shape_speedups or ())


def _roof_ms(shape: dict) -> float:
    """The shape's roofline time, recovered from the verdict (pct_roofline = 100 * roof / cand)."""
    pct, cand = shape.get("pct_roofline"), shape.get("candidate_ms")
    return float(pct) / 100.0 * float(cand) if pct and cand else 0.0


def geomean_ci(shapes: list[dict], seed: int, n: int = RESAMPLES) -> list[float] | None:
    """95% CI of the geomean speedup over `shapes` (verdict entries with `samples_ms`), or None
    when some shape has no samples to resample."""
    rng = np.random.default_rng(seed)
    log_ratios = np.zeros(n)
    if not shapes:
        return None
    for s in shapes:
        samples = s.get("samples_ms") or {}
        b, c = samples.get("base") or [], samples.get("candidate") or []
        k = min(len(b), len(c))  # pairs: repetition r timed base and candidate back to back
        if k == 0:
            return None
        b, c = np.asarray(b[:k], dtype=float), np.asarray(c[:k], dtype=float)
        idx = rng.integers(0, k, size=(n, k))
        roof = _roof_ms(s)
        log_ratios += np.log(np.maximum(np.median(b[idx], axis=1), roof)
                             / np.maximum(np.median(c[idx], axis=1), roof))
    biases = [aa_bias_factor(s.get("aa_bias")) for s in shapes]
    if any(b is None for b in biases):
        return None
    lo, hi = np.percentile(np.exp(log_ratios / len(shapes)), [2.5, 97.5])
    # A shape whose strayed A/A control its effect dwarfed carries that bias (timing.aa_bias): the
    # geomean may be off by its share of it.
    bias = float(np.exp(sum(np.log(b) for b in biases) / len(shapes)))
    return [float(lo) / bias, float(hi) * bias]


def ci_seed(run_seed: int, candidate_id: int) -> int:
    """The bootstrap's seed for one candidate of one run (the same verdict gives the same interval)."""
    digest = hashlib.sha256(f"{run_seed}/{candidate_id}/geomean-ci".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _shape_text(shape: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in (shape.get("shape") or {}).items())


def judge(verdict: dict, seed: int) -> dict:
    """{"win": bool, "reason": why not (None for a win), "geomean_ci95": [lo, hi] or None}."""
    g = verdict.get("geomean_speedup")
    out = {"win": False, "reason": None, "geomean_ci95": None}
    if not verdict.get("accepted"):
        out["reason"] = f"rejected on re-measurement ({verdict.get('reason')})"
        return out
    if is_noisy(verdict):
        out["reason"] = "the A/A control strayed past ±1% beyond its own CI (noisy measurement)"
        return out
    if g is None:
        out["reason"] = "no timing"
        return out
    shapes = verdict.get("shapes") or []
    ci = geomean_ci(shapes, seed)
    out["geomean_ci95"] = [round(ci[0], 4), round(ci[1], 4)] if ci else None
    if ci is None:
        out["reason"] = f"geomean {g:.3f}x has no timing samples to bound it with a confidence interval"
        return out
    if ci[0] <= 1.0:
        out["reason"] = (f"geomean {g:.3f}x, 95% CI [{ci[0]:.3f}, {ci[1]:.3f}]: the interval does not "
                         "lie above 1.0")
        return out
    slow = [shapes[i] for i in lost_shapes(shapes)]
    if slow:
        s = min(slow, key=lambda s: s["ci95"][1])
        out["reason"] = (f"{len(slow)} shape(s) slower than {SLOWEST_SHAPE}x beyond the CI, e.g. "
                         f"{_shape_text(s)}: {s.get('speedup') or 0:.3f}x, 95% CI "
                         f"[{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]")
        return out
    out["win"] = True
    return out
