"""The one sentence that says what a structural rewrite changed: the single owner of its wording.

Each transformation (coarsen.py, widen.py, persistent.py, hoist.py, loads.py) builds its `explain`
here, with a `detail` (how many expressions or loads, and their text) that report.md shows. The
bot's PR body renders the same sentence from result.json's validated `winner.rewrites` (transform,
kernel, axis, knobs) without any detail, with the names through its own inline-code quoting: no
text written by the run reaches it.
"""

from __future__ import annotations

from collections.abc import Callable

TRANSFORMS = ("widen", "coarsen", "persistent", "hoist", "merge_loads")
KNOBBED = ("widen", "coarsen", "persistent")  # one knob (a launcher literal) each; the others none
AXIAL = ("widen", "coarsen")  # transformations of one grid axis; the others have axis None
SHOWN = 3  # expressions or loads named in a sentence's detail


def _tick(name: str) -> str:
    return f"`{name}`"


def sentence(transform: str, kernel: str, axis: int | None, knobs: dict[str, int],
             detail: tuple[int, list[str]] | None = None,
             name: Callable[[str], str] | None = None) -> str:
    """One sentence for a reviewer. `detail` is (count, source texts) of hoisted expressions or
    merged loads; `name` quotes the kernel and knob names (default: the kernel in backticks, the
    knob bare). ValueError for an unknown transform or a missing knob."""
    if transform not in TRANSFORMS:
        raise ValueError(f"unknown rewrite transform {transform!r}")
    kname = name(kernel) if name else _tick(kernel)
    if transform in KNOBBED:
        if len(knobs) != 1:
            raise ValueError(f"a {transform} rewrite has exactly one knob, got {len(knobs)}")
        ((knob, value),) = knobs.items()
        knob = name(knob) if name else knob
    if transform == "coarsen":
        return (
            f"Program coarsening: each program of {kname} now does the work of {knob} = {value} "
            f"consecutive former programs along grid axis {axis} (an unrolled `tl.static_range` loop that "
            f"skips ids past the original grid), so that axis launches {value}x fewer, busier programs "
            f"({knob} is capped at the axis's size: a call with fewer programs runs them as before)."
        )
    if transform == "widen":
        return (
            f"Tile widening: each program of {kname} now handles {knob} = {value} rows of grid axis "
            f"{axis} at once as 2-D [{knob}, ...] tiles (per-row values become vectors, loads and stores "
            f"get a row mask), so that axis launches {value}x fewer programs with wider memory accesses "
            f"({knob} is capped at the axis's size: a call with fewer rows runs them as before)."
        )
    if transform == "persistent":
        return (
            f"Persistent launch: {kname} now starts (number of SMs) x {knob} = {value} programs "
            f"per SM instead of one program per work item, and each program loops over the former "
            f"programs' work items with a grid stride."
        )
    if transform == "hoist":
        count, what = _detail(detail, "expression(s)", "expressions")
        return (
            f"Hoisted loop invariants: in {kname} {count} that do not change across a loop's "
            f"iterations{what} are computed once before the loop."
        )
    count, what = _detail(detail, "load(s)", "loads")
    return (
        f"Merged repeated loads: in {kname} {count} repeated later in the same block with nothing in "
        f"between that could change them{what} are read once and reused."
    )


def _detail(detail: tuple[int, list[str]] | None, counted: str, plain: str) -> tuple[str, str]:
    """("4 expression(s)", " (`a`; `b`)") from a detail, ("expressions", "") without one."""
    if detail is None:
        return plain, ""
    count, texts = detail
    shown = "; ".join("`" + " ".join(t.split()) + "`" for t in texts[:SHOWN])
    more = "; ..." if len(texts) > SHOWN else ""
    return f"{count} {counted}", f" ({shown}{more})"
