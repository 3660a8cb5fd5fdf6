"""`kernelsmith sweep`: the exhaustive grid over the knobs the params mutator finds, the baseline every
search claim is compared with.

The grid is the full cartesian product of the discovered tunables' domains (the GridMutator's
space: single configurations), every point judged by the same evaluator and
referee as a search's candidates and stored in a normal run directory (run.json: mutator "grid",
command "sweep"). Points are visited in a random order fixed by `--seed`, so a sweep cut short by
`--minutes` is a uniform sample of the grid rather than its lexicographic corner (the first
knob's smallest values). A grid over GRID_CAP points is sampled down to GRID_CAP (result.json
says so). Points that launch the same kernels with the same arguments on every listed shape as a
point visited before (twins.py, from the launcher's code text) are skipped: one evaluation per
distinct launch; result.json counts both the knob combinations and the distinct launches. The
sweep's result adds, from the verdicts' per-shape speedups, the geomean a config chosen per shape
would reach, and whether the params mutator's own table rule would adopt such a table over the
best single config. After a complete grid that table is proposed once and judged like a point, so
the sweep's per-shape claim is a measured kernel (result.json `table_id`, `table_geomean`); a sweep
cut short by `--minutes` judges the table its verdicts so far make once its budget is spent
(`measure_table`), since a per-shape best over many single screens is biased upward: on the H200,
LMDeploy rms_norm's 167 points gave per-shape bests of 1.063x whose tables measured 1.033x.
"""

from __future__ import annotations

import json
import random
from statistics import geometric_mean

from kernelsmith.launch.tunables import label, space_points
from kernelsmith.launch.twins import COUNT_CAP
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.mutators.params import GridMutator

GRID_CAP = 100_000  # points visited at most; a bigger grid is sampled uniformly down to this


class SweepGrid(GridMutator):
    """The GridMutator's space, every point once, in a seeded random order (see module docstring)."""

    name = "grid"

    def __init__(self, task, *, device: str, seed: int, budget_hint: int = 40, cap: int = GRID_CAP):
        super().__init__(task, device=device, budget_hint=budget_hint)
        self.domains = [list(t.domain) for t in self.tunables]
        self.size = space_points(self.tunables)
        self.cap = cap
        self._grid = self._points(random.Random(f"sweep/{seed}"))
        self._counted: tuple[int, int] | None | bool = False  # not counted yet

    def propose(self, parent: dict, inspirations: list[dict], rng: random.Random,
                known: set[str] | None = None) -> Proposal | None:
        """The next point of the grid; once every point is proposed, the per-shape table the params
        mutator's rule would adopt from the verdicts (once), so that a sweep's per-shape claim is a
        measured kernel; None after that."""
        point = super().propose(parent, inspirations, rng, known)
        if point is not None or any(r.params.get("table") and not r.params.get("cut_short")
                                    for r in self.records.values()):
            return point  # a point, or the whole grid's table was proposed already (or before a resume)
        table = self.table_proposal()
        return self.proposal(table, known or set()) if table is not None else None

    def launches(self) -> tuple[int, int] | None:
        """(distinct launches of the grid's points on the listed shapes, points without a launch
        signature, each counted as its own); None when the launcher cannot be evaluated statically
        or the grid is over COUNT_CAP (or sampled)."""
        if self._counted is False:
            small = self.size <= min(self.cap, COUNT_CAP)
            self._counted = self.twins.space_count() if small else None
        return self._counted

    def dedupe_note(self) -> str | None:
        """Why some or all points could not be compared by their launches (None: all were)."""
        counted = self.launches()
        if counted is None:
            return self.twins.off or f"more than {COUNT_CAP} points: not counted"
        return self.twins.why if counted[1] else None
    def _points(self, rng: random.Random):
        """Every point of the grid (or GRID_CAP of them, drawn without replacement), shuffled."""
        for index in rng.sample(range(self.size), min(self.size, self.cap)):
            combo = []
            for dom in reversed(self.domains):  # mixed-radix digits, the last knob fastest
                index, digit = divmod(index, len(dom))
                combo.append(dom[digit])
            yield tuple(reversed(combo))

    def describe_grid(self) -> str:
        """The grid's size and knobs in words (printed when a sweep starts)."""
        knobs = " x ".join(f"{label(t)} ({len(t.domain)})" for t in self.tunables) or "no knobs"
        sampled = f"; more than {self.cap}: a uniform sample of {self.cap} is swept" * (self.size > self.cap)
        counted, note = self.launches(), self.dedupe_note()
        if counted is None or counted[1] == self.size:
            launches = f"; launches not compared ({note})"
        else:
            launches = f"; {counted[0]} distinct launches on the listed shapes, one point swept per launch"
            if counted[1]:
                launches += f" ({counted[1]} points not comparable, each its own: {note})"
        unfollowed = "".join(f"; not followed: {n}" for n in self.unfollowed)
        return f"grid of {self.size} configurations: {knobs}{sampled}{launches}{unfollowed}"


def measure_table(search, evaluator) -> int | None:
    """After a sweep's time budget: propose the per-shape table its verdicts make (when the params
    mutator's rule adopts one not judged before) and judge it like a point; returns its id."""
    grid = next((m for m in search.mutators if isinstance(m, SweepGrid)), None)
    if grid is None or not search.timed or not (search.stop_reason or "").startswith("time budget"):
        return None
    grid.sync(search.archive.all())
    table = grid.table_proposal()
    # `cut_short`: the whole grid's table is still owed by a resume that completes the grid.
    proposal = (grid.proposal({**table, "cut_short": True}, search.archive.known_hashes())
                if table is not None else None)
    if proposal is None:
        return None  # no table pays, or this very table was judged before a resume
    search.progress.note("time budget spent: judging the per-shape table of the configs swept so far")
    cid = search.record(proposal, island=0, generation=search.archive.max_generation() + 1)
    row = search.archive.get(cid)
    if row.status == "pending":
        evaluator.judge_late(row)
    return cid


def _per_shape(c: Candidate, index: dict[str, int], n: int) -> list[float | None]:
    """Per-shape speedups of a candidate whose shape timings are usable (accepted, timed at any
    depth, not noisy), in shape order."""
    out: list[float | None] = [None] * n
    if not c.shape_timings_usable:
        return out
    for s in c.verdict.shapes or []:
        i = index.get(json.dumps(s.get("shape"), sort_keys=True))
        if i is not None and s.get("speedup"):
            out[i] = float(s["speedup"])
    return out


def summary(search, rows: list[Candidate]) -> dict:
    """result.json's `sweep` block: grid size, points evaluated, best single config, per-shape bests."""
    grid = next(m for m in search.mutators if isinstance(m, SweepGrid))
    shapes = grid.shapes
    index = {json.dumps(s, sort_keys=True): i for i, s in enumerate(shapes)}
    grid_rows = [c for c in rows if c.mutator == "grid"]
    points = [c for c in grid_rows if not (c.get("params") or {}).get("table")]
    evaluated = [c for c in points if c.evaluated and not c.malformed]
    tables = [c for c in grid_rows
              if (c.get("params") or {}).get("table") and c.evaluated and not c.malformed]
    single = [(c.trusted_speedup, c) for c in evaluated if c.trusted_speedup]
    best_single, best_row = max(single, key=lambda x: (x[0], -x[1].id), default=(1.0, None))
    # The base is a point of the grid too (1.0 on every shape).
    best = [(1.0, None) for _ in shapes]
    for r in evaluated:
        for i, sp in enumerate(_per_shape(r, index, len(shapes))):
            if sp is not None and sp > best[i][0]:
                best[i] = (sp, r)
    per_shape = geometric_mean([b for b, _ in best]) if shapes else None
    # The params mutator's own rule (and margin) for adopting a per-shape table over the best single config.
    grid.sync(rows)
    table = grid.table_proposal()
    per_shape_wins = table is not None
    out = {
        "grid_size": grid.size,
        "distinct_launches": (grid.launches() or (None,))[0],
        "without_launch_signature": (grid.launches() or (None, None))[1],
        "launch_dedupe_note": grid.dedupe_note(),
        "knobs": {t.key: t.domain for t in grid.tunables},
        "sampled": grid.size > grid.cap,
        "proposed": len(points),
        "evaluated": len(evaluated),
        "complete": (search.stop_reason or "").startswith(("search space covered", "search space exhausted")),
        "best_single_geomean": round(best_single, 4),
        "best_single_id": best_row["id"] if best_row else None,
        "per_shape_best_geomean": round(per_shape, 4) if per_shape else None,
        "per_shape_best": [
            {"shape": s, "speedup": round(b, 4), "id": r["id"] if r else None,
             "values": (r.get("params") or {}).get("values") if r else None}
            for s, (b, r) in zip(shapes, best, strict=True)
        ],
        "per_shape_table_beats_single": per_shape_wins,
        "table_predicted_geomean": table.get("predicted") if table else None,
        **_measured_table(tables),
    }
    # What a search is measured against: a per-shape table the sweep measured (against its best
    # single config), else the per-shape bests where a table pays, else the best single config.
    if out["table_id"] is not None:
        out["target_geomean"] = max(out["best_single_geomean"], out["table_geomean"] or 0.0)
    elif per_shape_wins:
        out["target_geomean"] = out["per_shape_best_geomean"]
    else:
        out["target_geomean"] = out["best_single_geomean"]
    if not search.timed:  # the interpreter: correctness only, no speed to report
        out.update(best_single_geomean=None, best_single_id=None, per_shape_best_geomean=None,
                   per_shape_best=[], target_geomean=None, table_geomean=None)
    return out


def _measured_table(tables: list[Candidate]) -> dict:
    """The per-shape table the sweep measured after its grid: its id and all-shape geomean (None
    when it did not reach a measurement on every shape, i.e. lost to the best at the screen)."""
    if not tables:
        return {"table_id": None, "table_geomean": None}
    best = max(tables, key=lambda c: (c.trusted_speedup or 0.0, -c.id))
    return {"table_id": best.id,
            "table_geomean": round(best.trusted_speedup, 4) if best.trusted_speedup else None}
