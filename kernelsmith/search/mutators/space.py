"""The launch-configuration space of an operator file, and what the archive says about it.

Shared by the params mutator (Optuna, params.py) and the grid: the tunables found from the syntax
tree, what a per-shape table keys on (sizekeys.py) and its size buckets, rendering, validity
(domains, learned edges, Triton's tensor size limit), and `sync`, which rebuilds from archive rows
every config tried and its outcome, overall and per shape.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from statistics import fmean

from .sizekeys import SizeKey, resolve, size_key
from .tunables import MAX_NUMEL, discover, has_loops, relevant, render, render_table, values_of

TABLE_MARGIN = 1.01  # a per-shape table must beat the best single config by 1% (as the winner rule)

# Rejections that say a value is outside what the kernel or the device can take.
EDGE_REASONS = {"compile_error", "crash", "timeout", "incorrect", "wrong_on_fresh_shape"}
SPACE_MUTATORS = ("base", "params", "grid")
EDGE_EVIDENCE = 2  # failures at or beyond a value (with no success there) that make it an edge


def shape_sizes(harness, shapes: list[dict]) -> list[int] | None:
    """The largest tensor input's element count per shape, from fake tensors (nothing allocated)."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        sizes = []
        with FakeTensorMode():
            for shape in shapes:
                inputs = harness.make_inputs(dict(shape), "cpu", 0)
                sizes.append(max((int(v.numel()) for v in inputs.values() if hasattr(v, "numel")), default=0))
        return sizes
    except Exception:  # a harness that fake tensors cannot run: no per-shape tables then
        return None


def buckets(sizes: list[int] | None) -> tuple[list[int | None], list[int]]:
    """(limits, bucket index per shape): one bucket per distinct size, split at geometric midpoints."""
    if not sizes:
        return [None], [0] * len(sizes or [])
    distinct = sorted(set(sizes))
    limits: list[int | None] = [int(math.sqrt(a * b)) for a, b in itertools.pairwise(distinct)] + [None]
    return limits, [distinct.index(s) for s in sizes]


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
    edge: bool = False  # a failure that says a value is out of the kernel's or device's reach


class ConfigSpace:
    """The tunables of the operator file, per-shape size buckets, and the archive's records."""

    name = "space"

    def __init__(self, task, *, device: str, budget_hint: int = 40, sizes: list[int] | None = None):
        self.task = task
        self.base_code = task.base_code
        self.budget_hint = budget_hint
        self.tunables = relevant(discover(self.base_code), self.base_code, task.operator.entry)
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
        # Knobs a table varies per size bucket: those evaluated per call (in the keyed launcher).
        self.tabled = [
            t for t in self.tunables
            if t.per_call and len(t.domain) > 1 and (self.key is None or t.scope == self.key.scope)
        ]
        self.tried: set[str] = {config_key({"values": self.base_values})}
        self.records: dict[int, Record] = {}
        self.base_id: int | None = None
        self.hi: dict[str, int] = {}
        self.lo: dict[str, int] = {}

    # -- learning from the archive --------------------------------------------------------------
    def sync(self, rows: list[dict]) -> None:
        """Rebuild what was tried, how it did and the learned edges from archive rows (also on resume)."""
        self.records.clear()
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
            rec = self._record(row, params, shape_index)
            if rec is not None:
                self.records[row["id"]] = rec
        self._learn_edges()

    def _record(self, row: dict, params: dict, shape_index: dict) -> Record | None:
        changed = {k: v[1] for k, v in (params.get("changed") or {}).items() if k in self.by_key}
        values = {**self.base_values, **changed, **(params.get("values") or {})}
        if row["status"] == "pending":
            return Record(row["id"], params, values, "running")
        if row["status"] != "evaluated":
            return None  # a duplicate: its twin is the record
        verdict = row.get("verdict") or {}
        if not verdict.get("accepted"):
            # A compile-time limit is no edge of one knob's domain: it depends on the others (a block
            # that builds in seconds on 8 warps can take a minute on one).
            slow_build = (verdict.get("details") or {}).get("compile_limit_s") is not None
            edge = verdict.get("reason") in EDGE_REASONS and not slow_build
            return Record(row["id"], params, values, "failed", edge=edge)
        speed: list[float | None] = [None] * len(self.shapes)
        noisy = (verdict.get("timing") or {}).get("noisy")
        if verdict.get("timed") and not noisy:  # a noisy control: no per-shape call for a table
            for s in verdict.get("shapes") or []:
                i = shape_index.get(json.dumps(s.get("shape"), sort_keys=True))
                if i is not None and s.get("speedup"):
                    speed[i] = float(s["speedup"])
        return Record(row["id"], params, values, "ok", row.get("speedup"), speed)

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
        for t in self.tunables:
            for sign, edges in ((1, self.hi), (-1, self.lo)):
                edge = self._edge(t.key, t.base, sign, singles)
                if edge is not None:
                    edges[t.key] = edge

    def _edge(self, key: str, base: int, sign: int, singles: list[Record]) -> int | None:
        """The nearest value beyond `base` (direction `sign`) past which everything tried failed."""
        fails = sorted(
            {r.values[key] for r in singles if r.edge and sign * (r.values[key] - base) > 0},
            key=lambda v: sign * v,
        )
        for v in fails:
            beyond = [r for r in singles if sign * (r.values[key] - v) >= 0]
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
    def allowed(self, key: str) -> list[int]:
        """A knob's values within its learned edges (its base value always)."""
        t = self.by_key[key]
        inside = [v for v in t.domain if self.lo.get(key, -1) < v < self.hi.get(key, 1 << 62)]
        return sorted(set(inside) | {t.base})

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
            return render_table(
                self.base_code,
                self.tunables,
                table["limits"],
                table["rows"],
                params["values"],
                key=self.key.expr if self.key is not None else None,
            )
        return render(self.base_code, self.tunables, params["values"])

    def describe(self, params: dict) -> str:
        """The edit in words (the archive's `prompt` column for params candidates)."""
        changes = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in (params.get("changed") or {}).items())
        what = f"{self.name} mutator, {params.get('op')}: " + (changes or "configuration")
        if params.get("table"):
            by = self.key.expr if self.key is not None else "largest tensor size"
            what += f"; per-shape table by {by} with limits {params['table']['limits']}"
        return what

    def shape_configs(self, rec: Record) -> list[dict[str, int]] | None:
        """The config each harness shape ran with (a table's rows by the shape's size)."""
        table = rec.params.get("table")
        if not table:
            return [rec.values] * len(self.shapes)
        if self.sizes is None:
            return None
        out = []
        for size in self.sizes:
            i = next(i for i, lim in enumerate(table["limits"]) if lim is None or size <= lim)
            out.append({**rec.values, **table["rows"][i]})
        return out

    def changed_from_base(self, values: dict[str, int]) -> dict[str, list[int]]:
        """{key: [base value, new value]} for the knobs `values` changes."""
        return {k: [self.base_values[k], v] for k, v in values.items() if v != self.base_values.get(k)}

    def table_of(self, rows: list[dict]) -> dict:
        """Per-bucket rows merged where neighbours agree: {"limits", "rows"}."""
        limits, merged = [], []
        for limit, row in zip(self.limits, rows, strict=True):
            if merged and merged[-1] == row:
                limits[-1] = limit
            else:
                limits.append(limit)
                merged.append(row)
        return {"limits": limits, "rows": merged}

    # -- per-shape tables -----------------------------------------------------------------------
    def table_proposal(self) -> dict | None:
        """Each bucket's best config as a table, when it beats the best single config by the margin."""
        if len(self.limits) < 2 or not self.tabled or self.sizes is None:
            return None
        n = len(self.limits)
        singles: list[tuple[float, Record]] = []
        per_bucket: list[dict[str, list[float]]] = [{} for _ in range(n)]
        for rec in self.records.values():
            if rec.state != "ok" or not rec.speed:
                continue
            if not rec.params.get("table") and all(s is not None for s in rec.speed):
                singles.append((fmean(math.log(s) for s in rec.speed), rec))
            configs = self.shape_configs(rec)
            if configs is None:
                continue
            for b in range(n):
                idx = [i for i, x in enumerate(self.bucket_of) if x == b]
                if all(rec.speed[i] is not None for i in idx):
                    row = json.dumps({t.key: configs[idx[0]][t.key] for t in self.tabled}, sort_keys=True)
                    per_bucket[b].setdefault(row, []).append(fmean(math.log(rec.speed[i]) for i in idx))
        if not singles or not all(per_bucket):
            return None
        top, top_rec = max(singles, key=lambda x: x[0])
        best = [max(d.items(), key=lambda kv: fmean(kv[1])) for d in per_bucket]
        counts = [self.bucket_of.count(b) for b in range(n)]
        predicted = sum(fmean(v) * c for (_, v), c in zip(best, counts, strict=True)) / sum(counts)
        rows = [json.loads(r) for r, _ in best]
        if predicted < top + math.log(TABLE_MARGIN) or all(r == rows[0] for r in rows):
            return None
        return {
            "op": "table",
            "values": dict(top_rec.values),
            "table": self.table_of(rows),
            "predicted": round(math.exp(predicted), 4),
        }
