"""The params mutator (no LLM): evolves the launch configuration of the operator's file.

It finds the tunables from the syntax tree (tunables.py), probes far along each one first
(block sizes up to 256x the base), then steps from the elites with per-tunable momentum,
recombines elites, learns the failing edges of each domain from rejections, and composes a
per-shape table (configs keyed by problem size, as SGLang's tuned config files are) as soon as
the measurements show that different shapes want different configs. `GridMutator` is the plain
sweep of the same space, the baseline it is measured against.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from statistics import geometric_mean

from ..archive import code_hash
from ..edits import format_edits, make_edits
from . import Proposal
from .tunables import MAX_NUMEL, Tunable, discover, has_loops, relevant, render, render_table, values_of

KIND_WEIGHT = {"block": 3.0, "num_warps": 3.0, "scale": 2.0, "group": 1.0, "int": 1.0, "num_stages": 2.0}
PROBE_STEPS = {
    "block": (2, 4, -2, 6),
    "num_warps": (2, 3, 1),
    "scale": (2, -2, 4, -4),  # a divisor or multiplier: either direction may be the fast one
    "group": (1, -1),
    "int": (1, -1),
    "num_stages": (1, -1),
}
# Rejections that say a value is outside what the kernel or the device can take.
EDGE_REASONS = {"compile_error", "crash", "timeout", "incorrect", "wrong_on_fresh_shape"}
SPACE_MUTATORS = ("base", "params", "grid")


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


def _key(params: dict) -> str:
    return json.dumps({"values": params.get("values"), "table": params.get("table")}, sort_keys=True)


class ParamsMutator:
    """Evolves tunables of the operator file; see the module docstring."""

    name = "params"

    def __init__(self, task, *, device: str, budget_hint: int = 40, sizes: list[int] | None = None):
        self.task = task
        self.base_code = task.base_code
        self.tunables = relevant(discover(self.base_code), self.base_code, task.operator.entry)
        self.by_key = {t.key: t for t in self.tunables}
        self.base_values = values_of(self.tunables)
        self.loops = has_loops(self.base_code)
        harness = task.harness
        self.shapes = harness.shapes_for(device) if harness is not None else []
        if sizes is None and harness is not None and any(t.per_call for t in self.tunables):
            sizes = shape_sizes(harness, self.shapes)
        self.limits, self.bucket_of = buckets(sizes)
        self.trend: dict[str, float] = {}
        self.sensitivity: dict[str, float] = {}
        self.probes = self._probe_list(max(3, budget_hint // 3))
        self.tried: set[str] = {_key({"values": self.base_values})}
        self.records: dict[int, dict] = {}
        self.base_id: int | None = None
        self.hi: dict[str, int] = {}
        self.lo: dict[str, int] = {}

    # -- learning from the archive --------------------------------------------------------------
    def sync(self, rows: list[dict]) -> None:
        """Rebuild what was tried and learned from archive rows (idempotent; used on resume too)."""
        self.records.clear()
        self.hi.clear()
        self.lo.clear()
        moves: dict[str, list[float]] = {}
        shape_index = {json.dumps(s, sort_keys=True): i for i, s in enumerate(self.shapes)}
        for row in rows:
            if row["mutator"] == "base":
                self.base_id = row["id"]
            if row["mutator"] not in SPACE_MUTATORS:
                continue
            params = row.get("params") or ({"values": self.base_values} if row["mutator"] == "base" else None)
            if params is None or params.get("on") is not None:
                continue
            self.tried.add(_key(params))
            if row["status"] != "evaluated":
                continue
            verdict = row.get("verdict") or {}
            speed = [None] * len(self.shapes)
            noisy = (verdict.get("timing") or {}).get("noisy")
            if verdict.get("accepted") and verdict.get("timed") and not noisy:
                for s in verdict.get("shapes") or []:
                    i = shape_index.get(json.dumps(s.get("shape"), sort_keys=True))
                    if i is not None and s.get("speedup"):
                        speed[i] = float(s["speedup"])
            geomean = row.get("speedup") if verdict.get("accepted") and not noisy else None
            self.records[row["id"]] = {"params": params, "speed": speed, "geomean": geomean}
            changed = params.get("changed") or {}
            if len(changed) == 1:
                ((k, (old, new)),) = changed.items()
                # A compile-time limit is no edge of one knob's domain: it depends on the others
                # (a block that builds in seconds on 8 warps can take a minute on one).
                slow_build = (verdict.get("details") or {}).get("compile_limit_s") is not None
                if not verdict.get("accepted") and verdict.get("reason") in EDGE_REASONS and not slow_build:
                    if new > old:
                        self.hi[k] = min(self.hi.get(k, new), new)
                    else:
                        self.lo[k] = max(self.lo.get(k, new), new)
                parent = self.records.get(row.get("parent_id"))
                g, pg = self.records[row["id"]]["geomean"], parent and parent["geomean"]
                if g and pg:
                    moves.setdefault(k, []).append(math.log(g / pg) * (1 if new > old else -1))
        self.trend = {k: sum(v) for k, v in moves.items()}
        self.sensitivity = {k: sum(abs(x) for x in v) / len(v) for k, v in moves.items()}

    # -- proposing ------------------------------------------------------------------------------
    def propose(
        self, parent: dict, inspirations: list[dict], rng: random.Random, known: set[str] | None = None
    ) -> Proposal | None:
        """One new configuration derived from `parent`, never one tried before; None when exhausted."""
        known = known or set()
        for attempt in range(60):
            made = self._candidate(parent, inspirations, rng, attempt)
            if made is None:
                continue
            params, code, parent_id, parent_code = made
            k = _key(params)
            if params.get("on") is None and k in self.tried:
                continue
            self.tried.add(k)
            if code_hash(code) in known:
                continue
            edits = format_edits(make_edits(parent_code, code))
            return Proposal(
                mutator=self.name,
                parent_id=parent_id,
                code=code,
                prompt=self.describe(params),
                response=edits,
                params=params,
                inspiration_ids=params.pop("inspirations", []),
            )
        return None

    def describe(self, params: dict) -> str:
        """The edit in words (the archive's `prompt` column for params candidates)."""
        changes = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in (params.get("changed") or {}).items())
        what = f"{self.name} mutator, {params.get('op')}: " + (changes or "configuration")
        if params.get("table"):
            what += f"; per-shape table with limits {params['table']['limits']}"
        return what

    def _candidate(self, parent, inspirations, rng, attempt):
        if parent["mutator"] not in SPACE_MUTATORS:
            return self._foreign(parent, rng)
        if self.probes and attempt == 0:
            values = dict(self.base_values)
            changed = self.probes.pop(0)
            for k, v in changed.items():
                values[k] = v
            params = {
                "op": "probe",
                "values": values,
                "changed": {k: [self.base_values[k], v] for k, v in changed.items()},
            }
            return params, self._render(params), self.base_id, self.base_code
        if attempt == 0:
            table = self._table_proposal()
            if table is not None:
                return table, self._render(table), parent["id"], self._parent_code(parent)
        pparams = parent.get("params") or {"values": self.base_values}
        pvalues = {**self.base_values, **(pparams.get("values") or {})}
        if pparams.get("table") and rng.random() < 0.7:
            params = self._table_step(pparams, rng)
        elif rng.random() < 0.25 and (mate := self._mate(parent, inspirations, rng)) is not None:
            values = {k: rng.choice((pvalues[k], mate["values"][k])) for k in pvalues}
            params = {
                "op": "crossover",
                "values": values,
                "inspirations": [mate["id"]],
                "changed": {k: [pvalues[k], values[k]] for k in values if values[k] != pvalues[k]},
            }
            if pparams.get("table"):
                params["table"] = pparams["table"]
        else:
            values, changed = self._step(pvalues, self.tunables, rng)
            params = {"op": "step", "values": values, "changed": changed}
            if pparams.get("table"):
                params["table"] = pparams["table"]
        if not params.get("changed") or not self._valid(params):
            return None
        return params, self._render(params), parent["id"], self._parent_code(parent)

    def _parent_code(self, parent: dict) -> str:
        return parent.get("code") or self.base_code

    def _render(self, params: dict) -> str:
        table = params.get("table")
        if table:
            return render_table(
                self.base_code, self.tunables, table["limits"], table["rows"], params["values"]
            )
        return render(self.base_code, self.tunables, params["values"])

    def _weights(self, tunables: list[Tunable]) -> list[float]:
        out = []
        for t in tunables:
            w = KIND_WEIGHT.get(t.kind, 1.0) * (1.0 + 4.0 * self.sensitivity.get(t.key, 0.0))
            if t.kind == "num_stages" and not self.loops:
                w *= 0.1  # nothing to pipeline without a loop in a kernel
            out.append(w if len(t.domain) > 1 else 0.0)
        return out

    def _allowed(self, t: Tunable) -> list[int]:
        return [v for v in t.domain if self.lo.get(t.key, -1) < v < self.hi.get(t.key, 1 << 62)] or [t.base]

    def _step(self, values: dict, tunables: list[Tunable], rng: random.Random):
        """Move one or two tunables 1-3 places along their domains, biased by observed trends."""
        values = dict(values)
        changed = {}
        weights = self._weights(tunables)
        if not any(weights):
            return values, changed
        for _ in range(1 if rng.random() < 0.7 else 2):
            t = rng.choices(tunables, weights=weights)[0]
            dom = self._allowed(t)
            cur = values[t.key]
            idx = min(range(len(dom)), key=lambda i: abs(dom[i] - cur))
            p_up = 0.5 + 0.35 * math.tanh(3 * self.trend.get(t.key, 0.0))
            delta = rng.choices((1, 2, 3), weights=(0.5, 0.3, 0.2))[0] * (1 if rng.random() < p_up else -1)
            new = dom[max(0, min(len(dom) - 1, idx + delta))]
            if new == cur:
                new = dom[max(0, min(len(dom) - 1, idx - delta))]
            if new != cur:
                changed[t.key] = [changed.get(t.key, [cur])[0], new]
                values[t.key] = new
                if t.kind == "block" and new > cur and rng.random() < 0.3:
                    self._couple_warps(t, tunables, values, changed, rng)
        return values, changed

    def _couple_warps(self, t: Tunable, tunables: list[Tunable], values: dict, changed: dict, rng) -> None:
        """More work per program usually wants more warps: raise a num_warps of the same launch a step."""
        siblings = [
            w
            for w in tunables
            if w.kind == "num_warps"
            and w.key in values
            and (w.kernels & t.kernels if t.kernels else w.key.split(".")[0] == t.key.split(".")[0])
        ]
        if siblings:
            w = rng.choice(siblings)
            bigger = [v for v in self._allowed(w) if v > values[w.key]]
            if bigger:
                changed[w.key] = [changed.get(w.key, [values[w.key]])[0], bigger[0]]
                values[w.key] = bigger[0]

    def _valid(self, params: dict) -> bool:
        """Within domains and learned edges; two largest blocks of one launch within Triton's limit."""
        rows = (params.get("table") or {}).get("rows", [])
        for values in [params["values"]] + [{**params["values"], **r} for r in rows]:
            groups: dict[str, list[int]] = {}
            for t in self.tunables:
                v = values.get(t.key, t.base)
                inside = self.lo.get(t.key, -1) < v < self.hi.get(t.key, 1 << 62)
                if v not in t.domain or not inside and v != t.base:
                    return False
                if t.kind == "block":
                    group = t.key.split(".")[0] if t.key.startswith("config") else str(t.scope)
                    groups.setdefault(group, []).append(v)
            for vals in groups.values():
                top = sorted(vals)[-2:]
                if math.prod(top) > MAX_NUMEL:
                    return False
        return True

    def _mate(self, parent: dict, inspirations: list[dict], rng: random.Random) -> dict | None:
        mates = [
            r
            for r in inspirations
            if r["mutator"] in ("params", "grid")
            and r.get("params")
            and not r["params"].get("on")
            and r["params"].get("values")
            and r["id"] != parent["id"]
        ]
        if not mates:
            return None
        mate = rng.choice(mates)
        return {"id": mate["id"], "values": {**self.base_values, **mate["params"]["values"]}}

    def _foreign(self, parent: dict, rng: random.Random):
        """A parent from another mutator (an llm rewrite): retune the tunables of its own code."""
        code = parent.get("code") or ""
        try:
            tunables = relevant(discover(code), code, self.task.operator.entry)
        except SyntaxError:
            return None
        values, changed = self._step(values_of(tunables), tunables, rng)
        if not changed:
            return None
        params = {"op": "retune", "on": parent["id"], "values": values, "changed": changed}
        return params, render(code, tunables, values), parent["id"], code

    # -- per-shape tables -----------------------------------------------------------------------
    def _per_shape_configs(self, rec: dict) -> list[dict]:
        params = rec["params"]
        values = {**self.base_values, **(params.get("values") or {})}
        table = params.get("table")
        if not table or table["limits"] != self.limits:
            return [values] * len(self.shapes)
        return [{**values, **table["rows"][self.bucket_of[i]]} for i in range(len(self.shapes))]

    def _table_proposal(self) -> dict | None:
        """The table of per-bucket best configs, when it beats the best single config by > 1%."""
        per_call = [t.key for t in self.tunables if t.per_call]
        if len(self.limits) < 2 or not per_call or not self.records:
            return None
        n_buckets = len(self.limits)
        best: list[tuple[float, dict] | None] = [None] * n_buckets
        top_single, top_values = 0.0, None
        for rec in self.records.values():
            speed = rec["speed"]
            if any(s is None for s in speed) or not speed:
                continue
            configs = self._per_shape_configs(rec)
            g = geometric_mean(speed)
            if g > top_single:
                top_single, top_values = g, configs[-1]
            for b in range(n_buckets):
                idx = [i for i in range(len(speed)) if self.bucket_of[i] == b]
                score = geometric_mean([speed[i] for i in idx])
                if best[b] is None or score > best[b][0]:
                    best[b] = (score, {k: configs[idx[0]][k] for k in per_call})
        if top_values is None or any(b is None for b in best):
            return None
        sizes = [sum(1 for x in self.bucket_of if x == b) for b in range(n_buckets)]
        predicted = math.exp(sum(math.log(b[0]) * n for b, n in zip(best, sizes, strict=True)) / sum(sizes))
        rows = [b[1] for b in best]
        if predicted < top_single * 1.01 or all(r == rows[0] for r in rows):
            return None
        limits, merged = [], []
        for limit, row in zip(self.limits, rows, strict=True):
            if merged and merged[-1] == row:
                limits[-1] = limit
            else:
                limits.append(limit)
                merged.append(row)
        params = {
            "op": "table",
            "values": dict(top_values),
            "table": {"limits": limits, "rows": merged},
            "predicted": round(predicted, 4),
        }
        if len(merged) < 2 or _key(params) in self.tried:
            return None
        return params

    def _table_step(self, pparams: dict, rng: random.Random) -> dict:
        """Step the config of one size bucket of a table parent."""
        table = pparams["table"]
        b = rng.randrange(len(table["rows"]))
        per_call = [t for t in self.tunables if t.per_call]
        row = {**{t.key: pparams["values"].get(t.key, t.base) for t in per_call}, **table["rows"][b]}
        new_row, changed = self._step(row, per_call, rng)
        rows = [dict(r) for r in table["rows"]]
        rows[b] = new_row
        return {
            "op": "table-step",
            "values": dict(pparams["values"]),
            "table": {"limits": list(table["limits"]), "rows": rows},
            "changed": {f"{k}@{b}": v for k, v in changed.items()},
        }

    def _probe_list(self, limit: int) -> list[dict]:
        """Far probes along each tunable (round robin over tunables), plus blocks and warps together."""
        order = sorted(self.tunables, key=lambda t: -self._weights([t])[0])
        per_tunable = []
        for t in order:
            if t.kind == "num_stages" and not self.loops:
                continue
            idx = t.domain.index(t.base)
            vals = []
            for step in PROBE_STEPS.get(t.kind, (1, -1)):
                v = t.domain[max(0, min(len(t.domain) - 1, idx + step))]
                if v != t.base and v not in vals:
                    vals.append(v)
            per_tunable.append([{t.key: v} for v in vals])
        probes: list[dict] = []
        blocks = [t for t in self.tunables if t.kind in ("block", "num_warps") and len(t.domain) > 1]
        if len({t.kind for t in blocks}) == 2:
            together = {t.key: t.domain[min(len(t.domain) - 1, t.domain.index(t.base) + 2)] for t in blocks}
            probes.append(together)
        for level in itertools.zip_longest(*per_tunable):
            probes.extend(p for p in level if p is not None)
        seen, out = set(), []
        for p in probes:
            k = json.dumps(p, sort_keys=True)
            if k not in seen:
                seen.add(k)
                out.append(p)
        return out[:limit]


class GridMutator(ParamsMutator):
    """A plain grid sweep of the same space, in order (the baseline the params mutator must beat)."""

    name = "grid"

    def __init__(self, task, **kw):
        super().__init__(task, **kw)
        self._grid = itertools.product(*(t.domain for t in self.tunables))

    def propose(
        self, parent: dict, inspirations: list[dict], rng: random.Random, known: set[str] | None = None
    ) -> Proposal | None:
        """The next untried point of the grid; None when the grid is done."""
        for combo in self._grid:
            values = dict(zip((t.key for t in self.tunables), combo, strict=True))
            changed = {k: [self.base_values[k], v] for k, v in values.items() if v != self.base_values[k]}
            params = {"op": "grid", "values": values, "changed": changed}
            if _key(params) in self.tried:
                continue
            self.tried.add(_key(params))
            code = self._render(params)
            if known and code_hash(code) in known:
                continue
            return Proposal(
                mutator=self.name,
                parent_id=self.base_id,
                code=code,
                prompt=self.describe(params),
                params=params,
                response=format_edits(make_edits(self.base_code, code)),
            )
        return None
