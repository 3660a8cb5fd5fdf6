"""The rewrite mutator (no LLM): structural rewrites of the operator's kernels, found from the tree.

For every kernel the entry launches, it proposes tile widening and program coarsening along each
grid axis the kernel reads a program id of, a persistent launch, and merging repeated loads and
hoisting loop invariants where the tree shows them (rewrites/); first at their default knob, then
at other knob values. Each new knob (ROWS_GROUP, COARSEN_GROUP, PERSISTENT_GROUP) is a literal in
the launcher, so the params mutator tunes it afterwards like any launch choice. A kernel or
transformation that cannot be shown valid is declined, and the reason goes to the run's log once.

Rewrites apply to the base, or to a params (or llm) candidate; never to an already rewritten file.
The proposal order is fixed (no randomness), and `sync` rebuilds what was tried from the archive,
so a run is reproducible and resumable.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from dataclasses import dataclass

from kernelsmith.launch.tunables import tabled_names
from kernelsmith.pysource import parse
from kernelsmith.search.archive import code_hash
from kernelsmith.search.edits import format_edits, make_edits
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.mutators.rewrites import MARK, Rewrite
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site, find_sites, pid_calls
from kernelsmith.search.mutators.rewrites.coarsen import coarsen
from kernelsmith.search.mutators.rewrites.explain import KNOBBED, TRANSFORMS, sentence
from kernelsmith.search.mutators.rewrites.hoist import has_loop, hoist
from kernelsmith.search.mutators.rewrites.loads import has_repeated_loads, merge_loads
from kernelsmith.search.mutators.rewrites.persistent import persistent
from kernelsmith.search.mutators.rewrites.widen import widen

DEFAULT = {"widen": 4, "coarsen": 4, "persistent": 4}
ALTERNATES = {"widen": (2, 8, 16), "coarsen": (2, 8, 16), "persistent": (2, 8, 1)}
KNOBLESS = ("merge_loads", "hoist")
SOURCES = ("base", "params", "grid", "llm")  # parents whose code a rewrite may start from


@dataclass(frozen=True)
class Variant:
    """One transformation of one kernel with one knob value."""

    transform: str
    kernel: str
    axis: int | None
    value: int

    @property
    def key(self) -> str:
        """Stable name of the variant (archive params `key`, with the source's hash appended)."""
        axis = "" if self.axis is None else f"@{self.axis}"
        value = "" if self.transform in KNOBLESS else f"={self.value}"
        return f"{self.transform}:{self.kernel}{axis}{value}"

    def build(self, site: Site) -> Rewrite:
        """The rewritten file (raises Decline where the transformation cannot be shown valid)."""
        if self.transform == "merge_loads":
            return merge_loads(site)
        if self.transform == "hoist":
            return hoist(site)
        if self.transform == "widen":
            return widen(site, self.axis, self.value)
        if self.transform == "coarsen":
            return coarsen(site, self.axis, self.value)
        return persistent(site, self.value)


def variants(sites: list[Site]) -> list[Variant]:
    """Every variant for these launch sites: default knobs first, then the alternates."""
    first, later = [], []
    for site in sorted(sites, key=lambda s: s.kernel.name):
        axes = sorted(a for _, a, what in pid_calls(site.kernel) if what == "program_id")
        shapes = [(t, a) for t in ("widen", "coarsen") for a in dict.fromkeys(axes)] + [("persistent", None)]
        for transform, axis in shapes:
            first.append(Variant(transform, site.kernel.name, axis, DEFAULT[transform]))
            later += [Variant(transform, site.kernel.name, axis, v) for v in ALTERNATES[transform]]
        if has_repeated_loads(site):
            first.append(Variant("merge_loads", site.kernel.name, None, 0))
        if has_loop(site):  # where nothing is invariant, building it declines with the reason
            first.append(Variant("hoist", site.kernel.name, None, 0))
    return first + later


class RewriteMutator:
    """Proposes structural rewrites; see the module docstring."""

    name = "rewrite"

    def __init__(self, task, *, note: Callable[[str], None] | None = None):
        self.task = task
        self.entry = task.operator.entry
        self.note = note or (lambda text: None)
        self.noted: set[str] = set()
        self.tried: set[str] = set()
        self.base_id: int | None = None
        self._plans: dict[str, tuple[dict[str, Site], list[Variant]]] = {}
        sites, _ = self._plan(task.base_code)
        if not sites:
            self._say("rewrite: no kernel launch of the operator can be rewritten")

    def _say(self, text: str) -> None:
        if text not in self.noted:
            self.noted.add(text)
            self.note(text)

    def _plan(self, code: str) -> tuple[dict[str, Site], list[Variant]]:
        """(sites by kernel name, variants) of `code`, cached per code."""
        h = code_hash(code)
        if h not in self._plans:
            try:
                sites, declined = find_sites(code, self.entry)
                plan = variants(sites)
            except SyntaxError:
                sites, declined, plan = [], [], []
            except Exception as e:  # a file our analysis trips on: no rewrite of it, the search goes on
                sites, declined, plan = [], [f"the analysis failed ({type(e).__name__}: {e})"], []
            for reason in declined:
                self._say(f"rewrite declined: {reason}")
            self._plans[h] = ({s.kernel.name: s for s in sites}, plan)
        return self._plans[h]

    def sync(self, rows: list[dict]) -> None:
        """Rebuild what was tried from archive rows (idempotent; used on resume too)."""
        for row in rows:
            if row["mutator"] == "base":
                self.base_id = row["id"]
            elif row["mutator"] == self.name and (row.get("params") or {}).get("key"):
                self.tried.add(row["params"]["key"])

    def propose(
        self, parent: dict, inspirations: list[dict], rng: random.Random, known: set[str] | None = None
    ) -> Proposal | None:
        """The next untried rewrite of the parent's code (a params parent) or of the base; None when
        every one was tried."""
        sources = []
        pcode = (parent or {}).get("code")
        if (parent or {}).get("mutator") in SOURCES[1:] and pcode and MARK not in pcode:
            sources.append((parent["id"], pcode))
        sources.append((self.base_id, self.task.base_code))
        for source_id, code in sources:
            sites, plan = self._plan(code)
            for variant in plan:
                key = f"{variant.key}#{code_hash(code)[:12]}"
                if key in self.tried:
                    continue
                self.tried.add(key)
                try:
                    rewrite = variant.build(sites[variant.kernel])
                except Decline as e:
                    self._say(f"rewrite declined: {variant.transform} of {variant.kernel}: {e}")
                    continue
                except Exception as e:  # a bug of ours (e.g. code that does not parse): never a proposal
                    self._say(f"rewrite: {variant.key} failed ({type(e).__name__}: {e})")
                    continue
                if known and code_hash(rewrite.code) in known:
                    continue
                params = {
                    "op": "rewrite",
                    "key": key,
                    "transform": rewrite.transform,
                    "kernel": rewrite.kernel,
                    "axis": rewrite.axis,
                    "knobs": rewrite.knobs,
                    "explain": rewrite.explain,
                    "source": source_id,
                }
                return Proposal(
                    mutator=self.name,
                    parent_id=source_id,
                    code=rewrite.code,
                    prompt=self.describe(params),
                    response=format_edits(make_edits(code, rewrite.code)),
                    params=params,
                )
        return None

    def describe(self, params: dict) -> str:
        """The rewrite in words (the archive's `prompt` column)."""
        return f"{self.name} mutator, {params['transform']} {params['knobs']}: {params['explain']}"


def _lineage_rewrites(rows: list[dict], cid: int | None) -> list[dict]:
    """The rewrite rows in candidate `cid`'s lineage (itself, its parent, ...), oldest first."""
    by_id = {r["id"]: r for r in rows}
    out, seen = [], set()
    while cid is not None and cid in by_id and cid not in seen:
        seen.add(cid)
        row = by_id[cid]
        if row.get("mutator") == "rewrite":
            out.append(row)
        cid = row.get("parent_id")
    return out[::-1]


def explain_lineage(rows: list[dict], cid: int | None) -> list[str]:
    """The sentences of the rewrites in candidate `cid`'s lineage, oldest first (for report.md); a
    knob params retuned after the rewrite is said at the value candidate `cid`'s code assigns it."""
    code = next((r.get("code") for r in rows if r["id"] == cid), None)
    tabled = tabled_names(code) if code else set()  # a split (split.py) or a retune's table
    out = []
    for row in _lineage_rewrites(rows, cid):
        p = row.get("params") or {}
        said, knobs = p.get("explain"), p.get("knobs") or {}
        now = {**knobs, **knob_literals(code, knobs)} if code and knobs else knobs
        if now != knobs and p.get("transform") in KNOBBED:  # widen/coarsen/persistent: no detail
            said = sentence(p["transform"], p["kernel"], p.get("axis"), now)
        by_size = sorted(tabled & set(knobs))
        if said and by_size:  # the value varies with the size
            said += (f" {', '.join(by_size)} is chosen per input size by the `_KS_CONFIGS` table at the "
                     "top of the diff.")
        if said:
            out.append(said)
    return out


def rewrite_lineage(rows: list[dict], cid: int | None, code: str | None = None) -> list[dict]:
    """result.json's `winner.rewrites`: each rewrite in candidate `cid`'s lineage, oldest first, as
    {transform, kernel, axis, knobs}. With the candidate's `code`, a knob's value is the literal the
    code now assigns it (params may have retuned it after the rewrite)."""
    out = []
    for row in _lineage_rewrites(rows, cid):
        p = row.get("params") or {}
        if p.get("transform") not in TRANSFORMS or not isinstance(p.get("kernel"), str):
            continue
        knobs = dict(p.get("knobs") or {})
        out.append({"transform": p["transform"], "kernel": p["kernel"], "axis": p.get("axis"),
                    "knobs": {**knobs, **knob_literals(code, knobs)} if code else knobs})
    return out


def knob_literals(code: str, names) -> dict[str, int]:
    """The integer each of `names` is assigned in `code` (`NAME = 8` statements), where all its
    assignments agree; names assigned otherwise or not at all are left out."""
    try:
        tree = parse(code)
    except (SyntaxError, ValueError):
        return {}
    seen: dict[str, set] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    v = node.value
                    ok = isinstance(v, ast.Constant) and type(v.value) is int
                    seen.setdefault(target.id, set()).add(v.value if ok else None)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}
