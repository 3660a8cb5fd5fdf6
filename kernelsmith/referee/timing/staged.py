"""Multi-fidelity timing for the search (`timing="staged"`): time depth grows with promise.

Every candidate gets full correctness and integrity checks on every listed shape; only the depth
of its timing is staged, in the spirit of successive halving:

1. "screen_subset": a screen (few interleaved repetitions, no A/A control) on up to
   `SUBSET_SIZE` representative shapes, spread across the listed shapes' sizes (smallest, middle,
   largest by `bytes_moved`, else by input bytes; deterministic). Where the subset's geomean is
   below `SUBSET_SLACK` x the subset's bar, the candidate stops here. The subset's bar is the
   contender bar (`contender_at`, the best full-measured geomean so far) scaled to those shapes:
   by the best's own geomean on them over its geomean on all shapes (`best_shapes`, its per-shape
   speedups). Without that scaling a subset of shapes where speedups run low is held to a bar set
   by all of them: on the LMDeploy sampler the best's subset geomean was 9.2x against its 11.9x on
   all shapes, so every later candidate, the best itself included, stopped at the subset.
2. "screen": the remaining shapes are screened too; the all-shape screen geomean is compared with
   the bar exactly as before this stage existed. A screen below the bar whose geomean's 95% CI
   still reaches it (`near_miss`) is screened once more and decided on both screens' samples
   pooled (`details.first_screen_geomean` keeps the first): on a gain of a few percent one
   screen cannot tell a winner from the bar (SGLang gelu_and_mul on the H200: the set that won
   three sweeps screened at 1.013x, its full measurements 1.025x, and was never measured in full).
3. "full": contenders (all-shape screen geomean >= bar) get the full interleaved measurement with
   its A/A control on every shape. A candidate whose screen already loses a shape (slower than
   the winner rule's SLOWEST_SHAPE beyond the screen's own CI: `lost_shapes`) is no contender
   however fast its geomean: it cannot be the winner, and its full measurement would be spent on a
   number no decision reads (its per-shape screen still serves tables and the params studies).
   On SGLang fused_rmsnorm most launch configs lose the 1-token shape by 5-15%; in params runs
   there such full measurements took 1-6 of the 8-17 referee GPU-seconds a params run spent.
   Unless it is far ahead: an all-shape screen geomean at `promote_at` or above (the search's
   PROMOTE_MARGIN over its best full measurement, search/rules.py) is promoted to the full
   measurement all the same (`details.promoted`), so a search whose fast configs all lose a shape
   has a measured best from its first candidates.

The depth reached is the verdict's `timing.mode` and `details.timing_depth`. A candidate stopped
after the subset keeps its measured shapes (their per-shape speedups) and the subset geomean in
`details.subset_geomean`, but its `geomean_speedup` is null: a subset geomean is never compared
with an all-shape one. The search treats such a candidate as not faster than the base
(kernelsmith/search/selection.py). The slack makes the cut conservative: a candidate must be
clearly behind the best on the representative shapes to lose its all-shape screen, and a
missed candidate costs only search efficiency, never a false claim (winners are re-measured).
With no bar (`contender_at` None) or no more listed shapes than the subset, there is no subset
stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kernelsmith.referee.timing.ab import geomean
from kernelsmith.referee.verdict import is_contender, lost_shapes

SUBSET_SIZE = 3
SUBSET_SLACK = 0.95  # a subset geomean below this fraction of the bar stops the timing there
RESCREEN = True  # a near miss (near_miss) is screened once more; dev/probes/landscape_sim.py --no-rescreen


def representative(sizes: list[float], k: int = SUBSET_SIZE) -> list[int]:
    """Indices of up to `k` shapes spread across `sizes` (smallest, evenly spaced, largest), sorted."""
    n = len(sizes)
    if n <= k:
        return list(range(n))
    order = sorted(range(n), key=lambda i: (sizes[i], i))
    picks = {order[round(j * (n - 1) / (k - 1))] for j in range(k)} if k > 1 else {order[n // 2]}
    return sorted(picks)


def subset_can_contend(subset_geomean: float | None, contender_at: float) -> bool:
    """Whether a subset screen is close enough to the bar to be screened on every shape."""
    return subset_geomean is not None and subset_geomean >= SUBSET_SLACK * contender_at


def near_miss(shapes: list[dict], geomean_speedup: float | None, bar: float | None) -> bool:
    """Whether an all-shape screen below the bar cannot tell it from the bar: the bar lies within the
    95% CI of its geomean (each shape's log CI half-width, combined as independent errors)."""
    if geomean_speedup is None or bar is None or geomean_speedup >= bar:
        return False
    halves = []
    for s in shapes:
        lo, hi = (s.get("ci95") or [None, None])[:2]
        if not lo or not hi or lo <= 0 or hi < lo:
            return False
        halves.append(math.log(hi / lo) / 2)
    if not halves:
        return False
    return bar <= geomean_speedup * math.exp(math.hypot(*halves) / len(halves))


def subset_bar(contender_at: float, best_shapes: list[float | None] | None, subset: list[int]) -> float:
    """The contender bar on `subset`'s shapes: scaled by the best's geomean there over its geomean on
    every shape; the bar itself where the best's per-shape speedups are not all known."""
    if not best_shapes or any(not s or s <= 0 for s in best_shapes):
        return contender_at
    return contender_at * geomean([best_shapes[i] for i in subset]) / geomean(best_shapes)


def run_staged(timer: Callable[[str, list[int] | None, bool], bool], out: dict, sizes: list[float],
               contender_at: float | None, mark: Callable[[str], None] = lambda name: None,
               best_shapes: list[float | None] | None = None, promote_at: float | None = None) -> str:
    """Time a candidate in stages with `timer(mode, indices, host)` (timing.time_candidate bound
    to a session and candidate, filling `out`); returns the depth reached.

    `sizes`: one size per listed shape, to choose the representative subset. `mark(phase)` is
    called after each stage (the verdict's phase clock). `best_shapes`: the best's speedup on
    each listed shape (None where unknown), which scales the bar to the subset. `promote_at`: the
    all-shape screen geomean from which a lost shape no longer skips the full measurement.
    """
    n = len(sizes)
    subset = representative(sizes) if contender_at is not None and n > SUBSET_SIZE else list(range(n))
    if not timer("screen", subset, True):
        return _depth(out, "screen_subset" if len(subset) < n else "screen")
    if len(subset) < n:
        mark("screen_subset_timing")
        g_sub = geomean([out["shapes"][i]["speedup"] for i in subset])
        out["details"]["subset_geomean"] = g_sub
        out["details"]["subset_shapes"] = subset
        bar = subset_bar(contender_at, best_shapes, subset)
        out["details"]["subset_bar"] = bar
        if not subset_can_contend(g_sub, bar):
            out["geomean_speedup"] = None  # a subset geomean is no all-shape geomean
            out["timing"]["mode"] = "screen_subset"
            return _depth(out, "screen_subset")
        rest = [i for i in range(n) if i not in subset]
        if not timer("screen", rest, True):
            return _depth(out, "screen")
    mark("screen_timing")
    g = out["geomean_speedup"]
    if RESCREEN and not out["violations"] and near_miss(out["shapes"], g, contender_at):
        out["details"]["first_screen_geomean"] = g
        if not timer("rescreen", None, True):
            return _depth(out, "screen")
        mark("rescreen_timing")
        g = out["geomean_speedup"]
    if out["violations"] or not is_contender(g, contender_at):
        return _depth(out, "screen")
    lost = lost_shapes(out["shapes"])
    if lost:
        out["details"]["screen_lost_shapes"] = lost
        if promote_at is None or g is None or g < promote_at:
            return _depth(out, "screen")
        out["details"]["promoted"] = True
    out["details"]["screen_geomean"] = g
    timer("full", None, False)
    mark("full_timing")
    return _depth(out, "full")


def _depth(out: dict, depth: str) -> str:
    out["details"]["timing_depth"] = depth
    return depth
