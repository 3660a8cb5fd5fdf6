"""Which steps of an evolution archive become training data.

A step is one archive row (the child) with the row it was proposed from (the parent). Rules:
- a step is kept only when the child was accepted (correct and clean) and is faster than its
  parent: both timed (a verdict with timing, not marked noisy) and child speedup / parent speedup
  >= `min_gain`, the base counting as 1.0 (so a first step that made the kernel slower is dropped);
- the one exception: a first step (the parent is the base) whose child was not timed at all.
Runs without timing (the Triton interpreter) have no speedups, so none of their later steps is
"faster": from them only accepted first steps are kept. Rejected parents, duplicates, malformed
and pending proposals never make a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelsmith.search.candidate import Candidate

# Two referee measurements, each held by the A/A control: within ±1%, or (on kernels of a few
# microseconds) within the A/A ratio's own sampling CI (referee/timing.py aa_strayed).
DEFAULT_MIN_GAIN = 1.02


@dataclass
class Step:
    """parent -> child, with the gain over the parent (None without timing)."""

    parent: Candidate
    child: Candidate
    kind: str  # "first" (from the base) or "improve"
    gain: float | None
    inspirations: list[Candidate] = field(default_factory=list)


def step_gain(parent, child) -> float | None:
    """Child speedup over the parent (the base counts as 1.0); None unless both sides are timed
    and not noisy (Candidate.measured_speedup)."""
    parent, child = Candidate.of(parent), Candidate.of(child)
    if child.measured_speedup is None:
        return None
    if parent.is_base:
        return float(child.measured_speedup)
    if not parent.measured_speedup:
        return None
    return float(child.measured_speedup) / float(parent.measured_speedup)


def select_steps(rows, min_gain: float = DEFAULT_MIN_GAIN) -> tuple[list[Step], dict[str, int]]:
    """The steps the rules keep, in archive order, and {reason: count} for those dropped."""
    rows = [Candidate.of(r) for r in rows]
    by_id = {r.id: r for r in rows}
    base = next((r for r in rows if r.is_base), None)
    kept: list[Step] = []
    dropped: dict[str, int] = {}

    def drop(reason: str) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1

    for row in rows:
        if row.is_base:
            continue
        if row.status == "duplicate":
            drop("duplicate")
            continue
        if not row.evaluated:
            drop("pending")
            continue
        if row.code is None or row.malformed:
            drop("malformed")
            continue
        parent = by_id.get(row.parent_id) if row.parent_id is not None else base
        if parent is None or parent.code is None:
            drop("no_parent")
            continue
        if not row.accepted:
            drop("rejected")
            continue
        inspirations = [by_id[i] for i in row.get("inspiration_ids") or [] if i in by_id]
        gain = step_gain(parent, row)
        first = parent.is_base
        if first and not row.timed:
            kept.append(Step(parent, row, "first", gain, inspirations))
            continue
        if not first and not parent.accepted:
            drop("parent_rejected")
        elif row.noisy or (not first and parent.noisy):
            drop("noisy")
        elif gain is None:
            drop("untimed")
        elif gain < min_gain:
            drop("not_faster")
        else:
            kept.append(Step(parent, row, "first" if first else "improve", gain, inspirations))
    return kept, dropped


def best_per_trajectory(rows: list[dict], steps: list[Step], top: int = 1) -> list[Step]:
    """The `top` best kept steps (by gain, then earliest) on each lineage path from the base to a leaf."""
    by_child = {s.child["id"]: s for s in steps}
    parents = {r.get("parent_id") for r in rows}
    leaves = [r for r in rows if r.get("mutator") != "base" and r["id"] not in parents]
    by_id = {r["id"]: r for r in rows}
    chosen: dict[int, Step] = {}
    for leaf in leaves:
        path, node, seen = [], leaf, set()
        while node is not None and node["id"] not in seen:
            seen.add(node["id"])
            if node["id"] in by_child:
                path.append(by_child[node["id"]])
            pid = node.get("parent_id")
            node = by_id.get(pid) if pid is not None else None
        ranked = sorted(path, key=lambda s: (-(s.gain if s.gain is not None else 0.0), s.child["id"]))
        for s in ranked[:top]:
            chosen[s.child["id"]] = s
    return [chosen[k] for k in sorted(chosen)]
