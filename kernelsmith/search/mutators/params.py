"""The params mutator (no LLM): a model-based search over the launch configuration of the file.

The space (space.py) is the tunables found from the syntax tree, each over its allowed values.
Proposals come from Optuna studies (studies.py) rebuilt from the archive on every `sync`, so a
fixed `--seed` and the same visible rows give the same proposals and `--resume` continues:
- one study over every knob, told each single config's geomean speedup (log; a config screened on
  a few shapes only, its geomean there), its rejections as infeasible trials; the base is a known
  point. Its TPE sampler makes the joint moves.
- one study per shape-size bucket, told the per-shape speedups of that bucket's shapes from every
  trial (single configs and tables alike), whose per-bucket optima make a per-shape table, keyed
  on what the launcher computes the knobs from (sizekeys.py: for LMDeploy's sampler the vocabulary
  length), proposed only when it beats the best single config by TABLE_MARGIN (at most
  UNCLEAR_SPLITS per run may split a bucket on rows whose CIs overlap). A table parent is
  refined one bucket at a time by asking that bucket's study.
A parent from another mutator (a structural or model rewrite) gets a study of its own knobs
(`_retune`); a widening or coarsening measured faster at some sizes and slower at others is first
split, its knob tabled per size (split.py).
On a space whose launch sets can be counted (twins.py) and are few enough that the start-up's
proposals are NEAR_SHARE of them, the start-up walks the untried launch sets nearest the fastest
config so far (nearby.py) instead of TPE's random draws, which clamps bias toward degenerate sets;
on one of at most rules.ENUMERATE_LAUNCHES sets the walk goes on until every set is proposed (the
space enumerated in the model's order).
Never a config tried before, nor one launching the same kernels with the same arguments on every
listed shape as a config proposed before (a twin, twins.py): the global study is told the twin's
outcome for it instead. `GridMutator` is the plain sweep of the same space (one point per launch),
the baseline.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from statistics import fmean

from kernelsmith.launch.buckets import buckets
from kernelsmith.launch.tunables import discover, relevant, render, sources_of, values_of
from kernelsmith.search.archive import code_hash
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.edits import format_edits, make_edits
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.mutators.nearby import coordinates, distance
from kernelsmith.search.mutators.space import SPACE_MUTATORS, ConfigSpace, shape_sizes
from kernelsmith.search.mutators.split import split_proposal
from kernelsmith.search.mutators.studies import Observation, Study, load_optuna
from kernelsmith.search.rules import enumerates

__all__ = ["GridMutator", "ParamsMutator", "buckets", "shape_sizes"]

MAX_ASKS = 12  # sampler answers tried per proposal before an untried config is drawn at random
# Once SATURATED_SHARE of the last RECENT_ASKS proposals of the global study had to be drawn at
# random, the sampler is saturated (it keeps answering tried configs) and gets SATURATED_ASKS tries:
# each ask costs O(trials), and late in the H200 sampler run (240-360 rows) half the proposals spent
# all 12 and most others 5-12.
RECENT_ASKS = 10
SATURATED_SHARE = 0.3
SATURATED_ASKS = 3
BUCKET_ASK = 0.7  # chance that a table parent is refined one bucket at a time
ENUMERABLE = 50_000  # spaces up to this many configs are enumerated for untried points
# The start-up walks launch sets near the incumbent (nearby.py) where its proposals would be at least
# this share of the space's launch sets: replayed H200 sweeps, median referee-seconds to 95% of the
# best gain (20 seeds): gelu_and_mul (20 sets) 4.4 -> 2.0 and 4.2 -> 1.5, fused_rmsnorm (11) 1.6 -> 1.2
# and 1.7 -> 1.3; on the router (78) 6.7 -> 8.2 and on the sampler (432, 16 seeds) 2 -> 8 seeds
# missing it in 100 evaluations, whose fast configs lie far from the base: there TPE's draws stay.
NEAR_SHARE = 0.1


class ParamsMutator(ConfigSpace):
    """Asks Optuna studies for launch configurations; see the module docstring."""

    name = "params"

    def __init__(self, task, *, device: str, budget_hint: int = 40, sizes: list[int] | None = None):
        super().__init__(task, device=device, budget_hint=budget_hint, sizes=sizes)
        self.device = device
        self.splits_tried: set[int] = set()  # rewrite parents a split was looked for (split.py)
        load_optuna()  # a missing dependency is a clear error now, not mid-run
        self.n_startup = min(10, max(4, budget_hint // 6))
        self.studies: dict[object, Study] = {}
        self.retunes: dict[int, list[dict]] = {}
        self.near_made = 0  # start-up moves to launch sets near the incumbent (nearby.py), so far
        self._coords: dict[tuple, dict] = {}

    # -- the archive ----------------------------------------------------------------------------
    def sync(self, rows: list[dict]) -> None:
        """Rebuild records, edges and (lazily) every study from archive rows; idempotent."""
        super().sync(rows)
        self.studies.clear()
        self.retunes.clear()
        self.near_made = sum(1 for r in self.records.values() if r.params.get("op") == "near")
        for row in rows:
            on = (row.get("params") or {}).get("on")
            if row["mutator"] == self.name and on is not None:
                self.retunes.setdefault(on, []).append(row)
                self.tried.add(json.dumps({"on": on, "values": row["params"].get("values")}, sort_keys=True))

    def _global_study(self) -> Study:
        if "global" not in self.studies:
            singles = [r for r in self.records.values() if not r.params.get("table")]
            obs = [
                Observation(r.values, r.state, math.log(r.score) if r.score else 0.0)
                for r in singles + self.table_failures  # a table's failure singled out to one row
            ]
            allowed = {t.key: self.allowed(t.key) for t in self.tunables}
            self.studies["global"] = Study(allowed, obs, self.n_startup)
        return self.studies["global"]

    def _bucket_study(self, idx: tuple[int, ...]) -> Study:
        """The study of a bucket (or cell) holding shapes `idx`: the tabled knobs, told the speedups
        of those shapes from every trial."""
        if idx not in self.studies:
            obs = []
            for rec in self.records.values():
                configs = self.shape_configs(rec)
                if configs is None:
                    continue
                if len({json.dumps(configs[i], sort_keys=True) for i in idx}) > 1:
                    continue  # a table serving these shapes apart: no one row's outcome
                row = {t.key: configs[idx[0]][t.key] for t in self.tabled}
                speeds = [rec.speed[i] for i in idx] if rec.speed else []
                if rec.state != "ok":
                    obs.append(Observation(row, rec.state))
                elif all(s is not None for s in speeds) and speeds:
                    obs.append(Observation(row, "ok", fmean(math.log(s) for s in speeds)))
                elif rec.geomean is None and not any(rec.speed):  # untimed (interpreter): neutral
                    obs.append(Observation(row, "ok", 0.0))
            allowed = {t.key: self.allowed(t.key) for t in self.tabled}
            self.studies[idx] = Study(allowed, obs, self.n_startup)
        return self.studies[idx]

    # -- proposing ------------------------------------------------------------------------------
    def propose(
        self, parent: dict, inspirations: list[dict], rng: random.Random, known: set[str] | None = None
    ) -> Proposal | None:
        """One new configuration (never one tried before); None when the space is exhausted."""
        known = known or set()
        if parent["mutator"] not in SPACE_MUTATORS:
            return self._retune(parent, rng, known)
        table = self.table_proposal()
        if table is not None and (p := self.proposal(table, known)) is not None:
            return p
        if self.unclear_splits_left():
            table = self.table_proposal(unclear=True)
            if table is not None and (p := self.proposal(table, known)) is not None:
                return p
        pparams = parent.get("params") or {}
        if (pparams.get("table") and pparams.get("on") is None and self.sizes is not None and self.tabled
                and rng.random() < BUCKET_ASK):  # a retune's table is over its own code's knobs
            p = self._bucket_ask(parent, rng, known)
            if p is not None:
                return p
        if (p := self._near(rng, known)) is not None:
            self.near_made += 1
            return p
        return self._global_ask(rng, known)

    def _global_asks(self) -> int:
        """Sampler answers to try: SATURATED_ASKS once enough recent global proposals were random."""
        ops = [r.params.get("op") for r in self.records.values() if r.params.get("op") in ("ask", "untried")]
        recent = ops[-RECENT_ASKS:]
        saturated = len(recent) == RECENT_ASKS and recent.count("untried") >= SATURATED_SHARE * RECENT_ASKS
        return SATURATED_ASKS if saturated else MAX_ASKS

    def _global_ask(self, rng: random.Random, known: set[str]) -> Proposal | None:
        study = self._global_study()
        for _ in range(self._global_asks()):
            values = {**self.base_values, **study.ask(rng.getrandbits(31))}
            params = {"op": "ask", "values": values, "changed": self.changed_from_base(values)}
            if (p := self.proposal(params, known)) is not None:
                return p
            self._tell_twin(study, values)
        return self._untried(study, rng, known)

    def _near(self, rng: random.Random, known: set[str]) -> Proposal | None:
        """A config of the untried launch set nearest the incumbent's (the fastest single config so
        far, else the base); ties in a seeded random order. None where launch sets are not counted,
        and, on a space too large to enumerate (rules.enumerates), once the start-up is over or
        where it would not be NEAR_SHARE of the sets."""
        found = self.twins.space_groups()  # computed once per process (the run's layout needed it)
        sets = found[0] if found is not None else {}
        if not sets:
            return None
        startup = self.near_made < self.n_startup and len(sets) * NEAR_SHARE <= self.n_startup
        if not (startup or enumerates(len(sets) + found[1])):
            return None
        ranked = [r for r in self.records.values() if r.state == "ok" and not r.params.get("table")]
        best = max(ranked, key=lambda r: r.score or 1.0, default=None)
        incumbent = best.values if best is not None and (best.score or 1.0) > 1.0 else self.base_values
        here = self.twins.signature({"values": incumbent})
        if here is None:
            return None
        at = self._coordinates(here)
        untried = [(distance(at, self._coordinates(sig)), rng.random(), sig)
                   for sig in sets if sig not in self.twins.first]
        for _, _, sig in sorted(untried):
            for values in sets[sig]:
                params = {"op": "near", "values": values, "changed": self.changed_from_base(values)}
                if (p := self.proposal(params, known)) is not None:
                    return p
        return None

    def _coordinates(self, sig: tuple) -> dict:
        """A launch set's coordinates (nearby.py), memoised per run."""
        if sig not in self._coords:
            self._coords[sig] = coordinates(sig)
        return self._coords[sig]

    def _tell_twin(self, study: Study, values: dict[str, int]) -> None:
        """Tell the study a twin's outcome for `values` (same launches, so the same measurement)."""
        twin = self.twins.twin({"values": values})
        if twin is None:
            return
        rec = self.records.get(twin[1]) if twin[1] is not None else None
        if rec is None or rec.state == "running":  # proposed this generation or still being judged
            study.add(Observation(values, "running"))
        else:
            study.add(Observation(values, rec.state, math.log(rec.score) if rec.score else 0.0))

    def _untried(self, study: Study, rng: random.Random, known: set[str]) -> Proposal | None:
        """A random config no one tried (the sampler kept answering tried ones); None when none is left."""
        keys = list(study.allowed)
        if study.points() <= ENUMERABLE:
            combos = list(itertools.product(*(study.allowed[k] for k in keys)))
        else:
            combos = [tuple(rng.choice(study.allowed[k]) for k in keys) for _ in range(400)]
        rng.shuffle(combos)
        for combo in combos:
            values = {**self.base_values, **study.fixed, **dict(zip(keys, combo, strict=True))}
            params = {"op": "untried", "values": values, "changed": self.changed_from_base(values)}
            if (p := self.proposal(params, known)) is not None:
                study.add(Observation(values, "running"))
                return p
        return None

    def _bucket_ask(self, parent: dict, rng: random.Random, known: set[str]) -> Proposal | None:
        """The parent's table with one bucket's row from that bucket's study; where the parent
        already serves a bucket's cells apart (second level), one cell's row from that cell's."""
        pparams = parent["params"]
        rows = self.cell_rows(pparams["table"])
        b = rng.randrange(len(self.limits))
        mine = [k for k, c in enumerate(self.cells) if c[0] == b]
        if len({json.dumps(rows[k], sort_keys=True) for k in mine}) > 1:
            mine = [rng.choice(mine)]
        cells = {self.cells[k] for k in mine}
        study = self._bucket_study(tuple(i for i, c in enumerate(self.cell_of) if c in cells))
        where = f"{b}" if len(mine) > 1 or len(self.cell_limits[b]) == 1 else f"{b}.{self.cells[mine[0]][1]}"
        for _ in range(MAX_ASKS):
            row = {**rows[mine[0]], **study.ask(rng.getrandbits(31))}
            new = [dict(row) if k in mine else dict(r) for k, r in enumerate(rows)]
            table = self.table_of(new)
            if len(table["rows"]) < 2:
                continue
            old = rows[mine[0]]
            params = {
                "op": "bucket",
                "values": dict(pparams["values"]),
                "table": table,
                "changed": {f"{k}@{where}": [old.get(k), v] for k, v in row.items() if v != old.get(k)},
            }
            if (p := self.proposal(params, known, parent)) is not None:
                return p
        return None

    # -- a parent from another mutator ----------------------------------------------------------
    def _retune(self, parent: dict, rng: random.Random, known: set[str]) -> Proposal | None:
        """Retune the tunables of another mutator's code (an llm rewrite) with a study of its own;
        first, once, a structural rewrite that wins on some sizes and loses on others is split
        (split.py)."""
        if parent["id"] not in self.splits_tried:
            self.splits_tried.add(parent["id"])
            if (p := split_proposal(self.task, self.device, parent, known)) is not None:
                return p
        code = parent.get("code") or ""
        try:
            tunables = relevant(discover(code, sources_of(self.task)), code, self.task.operator.entry)
        except SyntaxError:
            return None
        own = values_of(tunables)
        obs = [Observation(own, "ok", _log_speedup(parent))]
        for row in self.retunes.get(parent["id"], []):
            c = Candidate.of(row)
            if c.params.get("table"):
                continue  # a split (split.py): no one config of the study's
            vals = {**own, **(c.params.get("values") or {})}
            if c.status == "pending":
                obs.append(Observation(vals, "running"))
            elif c.evaluated:
                ok = c.verdict is not None and c.verdict.accepted
                obs.append(Observation(vals, "ok" if ok else "failed", _log_speedup(c) if ok else 0.0))
        study = Study({t.key: t.domain for t in tunables}, obs, n_startup=2)
        for _ in range(MAX_ASKS):
            values = {**own, **study.ask(rng.getrandbits(31))}
            key = json.dumps({"on": parent["id"], "values": values}, sort_keys=True)
            if values == own or key in self.tried:
                continue
            self.tried.add(key)
            new = render(code, tunables, values)
            if code_hash(new) in known:
                continue
            params = {
                "op": "retune",
                "on": parent["id"],
                "values": values,
                "changed": {k: [own[k], v] for k, v in values.items() if v != own[k]},
            }
            return Proposal(
                mutator=self.name,
                parent_id=parent["id"],
                code=new,
                prompt=self.describe(params),
                response=format_edits(make_edits(code, new)),
                params=params,
            )
        return None


class GridMutator(ConfigSpace):
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
            params = {"op": "grid", "values": values, "changed": self.changed_from_base(values)}
            # Every point is judged, even one the space's learned domains would rule out.
            if (p := self.proposal(params, known or set(), checked=False)) is not None:
                return p
        return None


def _log_speedup(row) -> float:
    """What a study is told of an accepted candidate: its log geomean (0.0, the base's, untimed).
    Screen numbers count too: the study ranks configs, it decides nothing a number must back."""
    speedup = Candidate.of(row).speedup
    return math.log(speedup) if speedup else 0.0
