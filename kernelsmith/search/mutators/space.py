"""The launch-configuration space of an operator file, and what the archive says about it.

Shared by the params mutator (Optuna, params.py) and the grid: the tunables found from the syntax
tree, what a per-shape table keys on (sizekeys.py) and its size buckets, rendering, validity
(domains, learned edges, Triton's tensor size limit), configs that launch the same (twins.py), and
`sync`, which rebuilds from archive rows every config tried and its outcome, overall and per shape.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from statistics import fmean

from kernelsmith.launch.buckets import buckets, cells, lookup
from kernelsmith.launch.sizekeys import SizeKey, grid_key, resolve, size_key
from kernelsmith.launch.syntax import knob_order
from kernelsmith.launch.tunables import (
    MAX_NUMEL,
    entry_knobs,
    has_loops,
    label,
    render,
    render_table,
    sources_of,
    space_points,
    values_of,
)
from kernelsmith.launch.twins import LaunchTwins
from kernelsmith.referee.verdict import subset_geomean
from kernelsmith.search.archive import code_hash
from kernelsmith.search.candidate import RENDERED_MUTATORS, Candidate
from kernelsmith.search.edits import format_edits, make_edits
from kernelsmith.search.evidence import SIMPLER_WITHIN, SLOWEST_SHAPE, fragile
from kernelsmith.search.mutators import Proposal

# A per-shape table is a bigger change than one config: the winner rule takes the smaller change
# within SIMPLER_WITHIN of the fastest, so a table must beat the best single config by more.
TABLE_MARGIN = 1.0 + SIMPLER_WITHIN
# Tables per run whose second-level split rests on rows whose CIs overlap (screens have wide ones):
# predicted to pay by the margin, their own measurement decides, and the finals' smaller-change rule
# keeps a table out of a PR that is not 1% faster. SGLang fused_rmsnorm: the sweep's measured
# table was 1-2% above every single config, and the params rule never split on its screens.
UNCLEAR_SPLITS = 2

# Rejections that say a value is outside what the kernel or the device can take.
EDGE_REASONS = {"compile_error", "crash", "timeout", "incorrect", "wrong_on_fresh_shape"}
SPACE_MUTATORS = ("base", *RENDERED_MUTATORS)
EDGE_EVIDENCE = 2  # failures at or beyond a value (with no success there) that make it an edge


def shape_sizes(harness, shapes: list[dict]) -> list[int] | None:
    """The largest tensor input's element count per shape, from fake or meta tensors (no memory)."""
    try:
        from kernelsmith.harness.facts import fake_mode_for

        sizes = []
        with fake_mode_for(harness):
            for shape in shapes:
                inputs = harness.make_inputs(dict(shape), "cpu", 0)
                sizes.append(max((int(v.numel()) for v in inputs.values() if hasattr(v, "numel")), default=0))
        return sizes
    except Exception:  # a harness that fake tensors cannot run: no per-shape tables then
        return None


def config_key(params: dict) -> str:
    """What makes two params candidates the same config."""
    return json.dumps({"values": params.get("values"), "table": params.get("table")}, sort_keys=True)


@dataclass
class Record:
    """One config the archive holds: its params and outcome (ok | failed | running)."""

    id: int
    params: dict
    values: dict[str, int]
    state: str
    geomean: float | None = None
    speed: list[float | None] = field(default_factory=list)  # per harness shape, when measured
    ci: list[tuple[float, float] | None] = field(default_factory=list)  # its 95% CI, per shape
    # What a study ranks it by: its geomean, or where it was screened on a few shapes only, its
    # geomean there (a 0.24x screen told as "no number", i.e. the base's 1.0x, hid from the router's
    # study that big blocks are 4x slower; the study ranks, it decides nothing a number must back).
    score: float | None = None
    edge: bool = False  # a failure that says a value is out of the kernel's or device's reach


class ConfigSpace:
    """The tunables of the operator file, per-shape size buckets, and the archive's records."""

    name = "space"

    def __init__(self, task, *, device: str, budget_hint: int = 40, sizes: list[int] | None = None):
        self.task = task
        self.base_code = task.base_code
        self.budget_hint = budget_hint
        # Launch values the finder could not follow to where they are chosen, in words (said at start).
        self.tunables, self.unfollowed = entry_knobs(self.base_code, task.operator.entry, sources_of(task))
        self.by_key = {t.key: t for t in self.tunables}
        self.base_values = values_of(self.tunables)
        self.loops = has_loops(self.base_code)
        harness = task.harness
        self.shapes = harness.shapes_for(device) if harness is not None else []
        try:
            self.key: SizeKey | None = size_key(self.base_code, self.tunables, task.operator.entry)
        except Exception:  # a launcher shape the analysis does not know: key on element counts
            self.key = None
        if sizes is None and harness is not None and any(t.per_call for t in self.tunables):
            resolved = resolve(harness, self.shapes, self.key) if self.key is not None else None
            if resolved is not None:
                self.key, sizes = resolved
            else:  # the launcher's sizes could not be traced: the largest tensor's element count
                self.key, sizes = None, shape_sizes(harness, self.shapes)
        self.sizes = sizes
        self.limits, self.bucket_of = buckets(sizes)
        # A second level: the grid's other axes (tokens, batch), for shapes one first-level size holds.
        self.key2: SizeKey | None = None
        self.sizes2 = None
        if self.key is not None and sizes is not None and harness is not None:
            try:
                first = grid_key(self.base_code, self.tunables, task.operator.entry, self.key)
                resolved = resolve(harness, self.shapes, first) if first is not None else None
            except Exception:  # a launcher shape the analysis does not know: one level
                resolved = None
            if resolved is not None:
                self.key2, self.sizes2 = resolved
        self.cell_limits, self.cell_of = cells(self.bucket_of, self.sizes2, len(self.limits))
        if all(len(c) == 1 for c in self.cell_limits):  # no bucket holds two second-level sizes
            self.key2, self.sizes2 = None, None
        self.cells = sorted(set(self.cell_of))
        # Knobs a table varies per size bucket: those evaluated per call (in the keyed launcher).
        self.tabled = [
            t for t in self.tunables
            if t.per_call and len(t.domain) > 1 and (self.key is None or t.scope == self.key.scope)
        ]
        self.tried: set[str] = {config_key({"values": self.base_values})}
        self.records: dict[int, Record] = {}
        self._best_rows_memo: dict[tuple[int, ...], dict] = {}  # per shape set, since the last sync
        self.base_id: int | None = None
        self.hi: dict[str, int] = {}
        self.lo: dict[str, int] = {}
        self.table_failures: list[Record] = []  # failed tables' rows singled out (_learn_edges)
        self.twins = LaunchTwins(task, self.tunables, self.shapes, device,  # one proposal per launch
                                 rows_of=lambda p: self.shape_configs(Record(0, p, p["values"], "running")))

    # -- learning from the archive --------------------------------------------------------------
    def sync(self, rows: list[dict]) -> None:
        """Rebuild what was tried, how it did and the learned edges from archive rows (also on resume)."""
        self.records.clear()
        self._best_rows_memo.clear()
        self.twins.reset(self.base_values)
        shape_index = {json.dumps(s, sort_keys=True): i for i, s in enumerate(self.shapes)}
        for row in rows:
            if row["mutator"] == "base":
                self.base_id = row["id"]
            if row["mutator"] not in SPACE_MUTATORS:
                continue
            params = row.get("params") or ({"values": self.base_values} if row["mutator"] == "base" else None)
            if params is None or params.get("on") is not None:
                continue
            self.tried.add(config_key(params))
            self.twins.add(params, row["id"])
            rec = self._record(row, params, shape_index)
            if rec is not None:
                self.records[row["id"]] = rec
        self._learn_edges()

    def _record(self, row, params: dict, shape_index: dict) -> Record | None:
        changed = {k: v[1] for k, v in (params.get("changed") or {}).items() if k in self.by_key}
        values = {**self.base_values, **changed, **(params.get("values") or {})}
        c = Candidate.of(row)
        if c.status == "pending":
            return Record(c.id, params, values, "running")
        if not c.evaluated:
            return None  # a duplicate: its twin is the record
        v = c.verdict
        if v is None or not v.accepted:
            # A compile-time limit is no edge of one knob's domain: it depends on the others (a block
            # that builds in seconds on 8 warps can take a minute on one).
            slow_build = v is not None and (v.details or {}).get("compile_limit_s") is not None
            edge = v is not None and v.reason in EDGE_REASONS and not slow_build
            return Record(c.id, params, values, "failed", edge=edge)
        speed: list[float | None] = [None] * len(self.shapes)
        ci: list[tuple[float, float] | None] = [None] * len(self.shapes)
        if v.shape_timings_usable:  # a noisy control: no per-shape call for a table
            for s in v.shapes or []:
                i = shape_index.get(json.dumps(s.get("shape"), sort_keys=True))
                if i is not None and s.get("speedup"):
                    speed[i] = float(s["speedup"])
                    lo, hi = (s.get("ci95") or [None, None])[:2]
                    ci[i] = (float(lo), float(hi)) if lo and hi else (speed[i], speed[i])
        score = c.speedup if c.speedup is not None else subset_geomean(v)
        return Record(c.id, params, values, "ok", c.speedup, speed, ci, score=score)

    def _learn_edges(self) -> None:
        """A value is an edge when failures at or beyond it (away from the base) reach EDGE_EVIDENCE
        and nothing there succeeded. A failure is evidence against a knob only when each other knob's
        value in it is known to work (the base's, or one in an accepted config): a failure that
        changed that knob alone is evidence enough; one whose cause is ambiguous counts for none
        (the sampler's constraints still steer away from it)."""
        self.hi.clear()
        self.lo.clear()
        singles = [r for r in self.records.values() if not r.params.get("table")]
        self._working = {k: {v} for k, v in self.base_values.items()}
        for r in singles:
            if r.state == "ok":
                for k, v in r.values.items():
                    self._working.setdefault(k, set()).add(v)
        # A failed table all of whose rows but one are configs known to work singles that row out.
        works = [self.base_values] + [r.values for r in singles if r.state == "ok"]
        self.table_failures.clear()
        for r in self.records.values():
            table = r.params.get("table")
            if r.state == "failed" and table:
                unknown = [v for v in ({**r.values, **row} for row in table["rows"]) if v not in works]
                if len(unknown) == 1:
                    self.table_failures.append(Record(r.id, {}, unknown[0], "failed", edge=r.edge))
        singles += self.table_failures
        for t in self.tunables:
            for sign, edges in ((1, self.hi), (-1, self.lo)):
                edge = self._edge(t.key, t.base, sign, singles)
                if edge is not None:
                    edges[t.key] = edge

    def _edge(self, key: str, base: int, sign: int, singles: list[Record]) -> int | None:
        """The nearest value beyond `base` (direction `sign`) past which everything tried failed."""
        fails = sorted(
            {knob_order(r.values[key]) for r in singles
             if r.edge and sign * (knob_order(r.values[key]) - knob_order(base)) > 0},
            key=lambda v: sign * v,
        )
        for v in fails:
            beyond = [r for r in singles if sign * (knob_order(r.values[key]) - v) >= 0]
            evidence = sum(self._evidence(r, key) for r in beyond if r.edge)
            if evidence >= EDGE_EVIDENCE and all(r.state == "failed" for r in beyond):
                return v
        return None

    def _evidence(self, rec: Record, key: str) -> int:
        others = [(k, v) for k, v in rec.values.items() if k != key]
        if all(v == self.base_values.get(k, v) for k, v in others):
            return EDGE_EVIDENCE
        return int(all(v in self._working.get(k, {v}) for k, v in others))

    # -- the space ------------------------------------------------------------------------------
    def launch_count(self) -> int:
        """The space's distinct launches on the listed shapes (twins.py: a config without a launch
        signature counts as its own), or, where they cannot be counted, its knob combinations."""
        counted = self.twins.space_count()
        return counted[0] if counted is not None else space_points(self.tunables)

    def coverage(self) -> tuple[int, int] | None:
        """(launch sets judged or proposed since the last sync, the space's launch sets), where every
        config of the space has a launch signature; None where they are not all counted."""
        found = self.twins.space_groups()
        if found is None or found[1]:
            return None
        sets = found[0]
        done = 0
        for sig in sets:
            first = self.twins.first.get(sig)
            # A row id without its verdict yet is still pending; a proposal not yet synced (None) is
            # in flight or judged, as the loop knows (it asks once nothing is in flight).
            rec = self.records.get(first[1]) if first is not None and first[1] is not None else None
            if first is not None and (rec is None or rec.state != "running"):
                done += 1
        return done, len(sets)

    def allowed(self, key: str) -> list[int]:
        """A knob's values within its learned edges (its base value always)."""
        t = self.by_key[key]
        inside = [v for v in t.domain if self.lo.get(key, -1) < knob_order(v) < self.hi.get(key, 1 << 62)]
        return sorted(set(inside) | {t.base}, key=knob_order)

    def valid(self, params: dict) -> bool:
        """Within domains and learned edges; two largest blocks of one launch within Triton's limit."""
        rows = (params.get("table") or {}).get("rows", [])
        for values in [params["values"]] + [{**params["values"], **r} for r in rows]:
            groups: dict[str, list[int]] = {}
            for t in self.tunables:
                v = values.get(t.key, t.base)
                if v not in self.allowed(t.key):
                    return False
                if t.kind == "block":
                    group = t.key.split(".")[0] if t.key.startswith("config") else str(t.scope)
                    groups.setdefault(group, []).append(v)
            for vals in groups.values():
                if math.prod(sorted(vals)[-2:]) > MAX_NUMEL:
                    return False
        return True

    def render(self, params: dict) -> str:
        """The operator file with a config (or a per-shape table) written in."""
        table = params.get("table")
        if table:
            key, key2 = (k.expr if k is not None else None for k in (self.key, self.key2))
            return render_table(self.base_code, self.tunables, table["limits"], table["rows"],
                                params["values"], key=key, limits2=table.get("limits2"), key2=key2)
        return render(self.base_code, self.tunables, params["values"])

    def describe(self, params: dict) -> str:
        """The edit in words (the archive's `prompt` column for params candidates)."""
        changes = ", ".join(f"{k}: {self._show(k, a)} -> {self._show(k, b)}"
                            for k, (a, b) in (params.get("changed") or {}).items())
        what = f"{self.name} mutator, {params.get('op')}: " + (changes or "configuration")
        if params.get("table"):
            by = self.key.expr if self.key is not None else "largest tensor size"
            what += f"; per-shape table by {by} with limits {params['table']['limits']}"
            if params["table"].get("limits2") and self.key2 is not None:
                what += f", then by {self.key2.expr} with limits {params['table']['limits2']}"
        return what

    def _show(self, key: str, value) -> str:
        t = self.by_key.get(key.split("@")[0])
        return t.show(value) if t is not None else str(value)

    def describe_space(self) -> str:
        """The knobs in words, and the launch values that could not be followed (printed at start)."""
        knobs = [t for t in self.tunables if len(t.domain) > 1]
        names = ", ".join(label(t) for t in knobs)
        said = f"{len(knobs)} knob{'s' * (len(knobs) != 1)} ({names})" if knobs else "no knobs"
        return said + "".join(f"; not followed: {n}" for n in self.unfollowed)

    def shape_configs(self, rec: Record) -> list[dict[str, int]] | None:
        """The config each harness shape ran with (a table's rows by the shape's size)."""
        table = rec.params.get("table")
        if not table:
            return [rec.values] * len(self.shapes)
        if self.sizes is None:
            return None
        sizes2 = self.sizes2 or [None] * len(self.sizes)
        return [{**rec.values, **lookup(table, s, s2)} for s, s2 in zip(self.sizes, sizes2, strict=True)]

    def changed_from_base(self, values: dict[str, int]) -> dict[str, list[int]]:
        """{key: [base value, new value]} for the knobs `values` changes."""
        return {k: [self.base_values[k], v] for k, v in values.items() if v != self.base_values.get(k)}

    def table_of(self, rows: list[dict]) -> dict:
        """Per-cell rows (one per `self.cells`) merged where neighbours agree: {"limits", "rows"},
        and "limits2" (the second level's, parallel to "limits") where a bucket's cells differ."""
        groups: list[tuple[int | None, list]] = []  # (first-level limit, [(second-level limit, row)])
        for b, limit in enumerate(self.limits):
            sub: list[tuple[int | None, dict]] = []
            for (cb, c), row in zip(self.cells, rows, strict=True):
                if cb == b:
                    lim2 = self.cell_limits[b][c]
                    if sub and sub[-1][1] == row:
                        sub[-1] = (lim2, row)
                    else:
                        sub.append((lim2, row))
            if groups and len(sub) == 1 and len(groups[-1][1]) == 1 and groups[-1][1][0][1] == sub[0][1]:
                groups[-1] = (limit, groups[-1][1])
            else:
                groups.append((limit, sub))
        flat = [(limit, lim2, row) for limit, sub in groups for lim2, row in sub]
        table = {"limits": [f[0] for f in flat], "rows": [f[2] for f in flat]}
        if any(f[1] is not None for f in flat):
            table["limits2"] = [f[1] for f in flat]
        return table

    def cell_rows(self, table: dict) -> list[dict]:
        """A table's row for each of this space's cells (first-level bucket, second-level cell)."""
        sizes2 = self.sizes2 or [None] * len(self.sizes)
        first = {cell: i for i, cell in reversed(list(enumerate(self.cell_of)))}
        return [dict(lookup(table, self.sizes[first[c]], sizes2[first[c]])) for c in self.cells]

    def proposal(self, params: dict, known: set[str], parent: dict | None = None,
                 checked: bool = True) -> Proposal | None:
        """The candidate for `params` (a parent's child, else the base's) unless invalid (`checked`),
        tried or the twin of a config proposed before; marks it tried."""
        if checked and not self.valid(params):
            return None
        k = config_key(params)
        if k in self.tried:
            return None
        self.tried.add(k)
        if self.twins.twin(params) is not None:
            return None  # it launches what a config proposed before does: nothing new to measure
        code = self.render(params)
        if code_hash(code) in known:
            return None
        self.twins.add(params)
        parent_id = parent["id"] if parent is not None else self.base_id
        parent_code = (parent or {}).get("code") or self.base_code
        return Proposal(
            mutator=self.name,
            parent_id=parent_id,
            code=code,
            prompt=self.describe(params),
            response=format_edits(make_edits(parent_code, code)),
            params=params,
        )

    # -- per-shape tables -----------------------------------------------------------------------
    def _best_rows(self, idx: list[int]) -> dict[str, tuple[float, float, float]]:
        """{row: (mean log speedup, and of its 95% CI bounds) over the shapes `idx`}, from every
        trial whose rows for those shapes agree (single configs and tables alike)."""
        if (key := tuple(idx)) in self._best_rows_memo:  # each bucket and cell, on every proposal
            return self._best_rows_memo[key]
        per_row: dict[str, list[tuple[float, float, float]]] = {}
        for rec in self.records.values():
            if rec.state != "ok" or not rec.speed or any(rec.speed[i] is None for i in idx):
                continue
            configs = self.shape_configs(rec)
            if configs is None:
                continue
            rows = {json.dumps({t.key: configs[i][t.key] for t in self.tabled}, sort_keys=True) for i in idx}
            if len(rows) == 1:
                cis = {i: rec.ci[i] if len(rec.ci) > i and rec.ci[i] else (rec.speed[i],) * 2 for i in idx}
                logs = [(math.log(rec.speed[i]), math.log(cis[i][0]), math.log(cis[i][1])) for i in idx]
                per_row.setdefault(rows.pop(), []).append(tuple(fmean(x[j] for x in logs) for j in range(3)))
        out = self._best_rows_memo[key] = {r: tuple(fmean(x[j] for x in v) for j in range(3))
                                           for r, v in per_row.items()}
        return out

    def unclear_splits_left(self) -> int:
        """How many more tables with a split on overlapping CIs this run may propose."""
        return max(0, UNCLEAR_SPLITS - sum(1 for r in self.records.values() if r.params.get("unclear")))

    def table_proposal(self, unclear: bool = False) -> dict | None:
        """Each bucket's best config as a table, when it beats the best single config by the margin.
        A bucket is split by the second-level size only where its cells' best rows differ, serving
        them apart is predicted to beat its best single row by the same margin, and each cell served
        apart is faster on its own row beyond both rows' 95% CIs (no split on noise). With `unclear`,
        the table that also splits where those CIs overlap ("unclear": True), None if it would not.

        A repair: where the best single config is slower than the winner rule's SLOWEST_SHAPE on
        some shape (by its point estimate: a re-measurement then fails it more often than not), a
        table that serves each such cell a row that is not slow there is proposed too when it is
        predicted within the margin of the best single config. The winner rule would reject the
        single config however fast its geomean (SGLang fused_rmsnorm: 1.12x, but 0.93x at 1 token)."""
        if len(self.cells) < 2 or not self.tabled or self.sizes is None:
            return None
        singles = [
            (fmean(math.log(s) for s in rec.speed), rec)
            for rec in self.records.values()
            if rec.state == "ok" and rec.speed and not rec.params.get("table")
            and all(s is not None for s in rec.speed)
        ]
        if not singles:
            return None
        top, top_rec = max(singles, key=lambda x: x[0])
        repair = fragile(top_rec.speed)
        rows, total, cell_logs = [], 0.0, []  # cell_logs: each served cell's mean log speedup
        unclear_used = False
        for b in range(len(self.limits)):
            idx = [i for i, x in enumerate(self.bucket_of) if x == b]
            whole = self._best_rows(idx)
            mine = [c for c in self.cells if c[0] == b]
            split = [self._best_rows([i for i, x in enumerate(self.cell_of) if x == c]) for c in mine]
            if not whole or not all(split):
                return None
            row, value = max(((r, v[0]) for r, v in whole.items()), key=lambda kv: kv[1])
            best = [max(((r, v[0]) for r, v in d.items()), key=lambda kv: kv[1]) for d in split]
            counts = [self.cell_of.count(c) for c in mine]
            apart = sum(v * n for (_, v), n in zip(best, counts, strict=True)) / len(idx)
            clear = all(r == row or d[r][1] > d[row][2] for (r, _), d in zip(best, split, strict=True))
            pays = len({r for r, _ in best}) > 1 and apart >= value + math.log(TABLE_MARGIN)
            if pays and (clear or unclear):
                served = [r for r, _ in best]
                unclear_used = unclear_used or not clear
            else:
                served = [_unslowed(d, row, r) if repair else row
                          for (r, _), d in zip(best, split, strict=True)]
            rows += [json.loads(r) for r in served]
            cell_logs += [d[r][0] for r, d in zip(served, split, strict=True)]
            total += sum(d[r][0] * n for r, d, n in zip(served, split, counts, strict=True))
        predicted = total / len(self.sizes)
        # A repair needs only to come within the margin: the single config cannot win at all.
        repaired = repair and min(cell_logs) >= math.log(SLOWEST_SHAPE)
        needed = top + (-math.log(TABLE_MARGIN) if repaired else math.log(TABLE_MARGIN))
        if predicted < needed or all(r == rows[0] for r in rows) or unclear_used != unclear:
            return None
        return {
            "op": "table",
            "values": dict(top_rec.values),
            "table": self.table_of(rows),
            "predicted": round(math.exp(predicted), 4),
            **({"unclear": True} if unclear else {}),
        }


def _unslowed(cell: dict[str, tuple[float, float, float]], row: str, own: str) -> str:
    """The row to serve a cell: the bucket's `row`, or the cell's `own` best row where `row` is
    slower than SLOWEST_SHAPE there (point estimate) and `own` is not."""
    slow = math.log(SLOWEST_SHAPE)
    return own if cell[row][0] < slow <= cell[own][0] else row
