"""A structural rewrite used only at the sizes where it wins: its knob tabled per size.

Tile widening and coarsening trade per-program work for fewer programs: on Liger layer_norm (an
H100) four rows a program made short rows (4096 x 768) 1.105x faster and long ones (4096 x 4096)
0.971x. The rewrite's knob at 1 (one row a program, one step) runs as the base does, so a per-size
table of the knob (launch/tunables.py `render_table`, keyed as the params search keys its tables,
space.py) keeps the rewrite where its measurement beat the base and turns it off where it lost.
Proposed once per such parent, from its per-shape measurement: every shape timed, at least one
slower beyond its 95% CI and one faster beyond it, in different size cells.
"""

from __future__ import annotations

import dataclasses

from kernelsmith.search.candidate import Candidate
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.mutators.space import ConfigSpace

SPLIT = ("widen", "coarsen")  # rewrites whose knob at 1 is the base's one program per former one
OFF = 1


def _verdict_shapes(parent: dict) -> list[dict] | None:
    """The parent's per-shape entries where every shape was timed and they may be read; else None."""
    v = Candidate.of(parent).verdict
    if v is None or not v.shape_timings_usable:
        return None
    shapes = v.shapes or []
    if not shapes or any(s.get("speedup") is None or not s.get("ci95") for s in shapes):
        return None
    return shapes


def split_proposal(task, device: str, parent: dict, known: set[str]) -> Proposal | None:
    """The parent rewrite with its knob at 1 in the size cells where it lost, or None where no such
    split is possible (another rewrite, an untimed or partly timed parent, nothing lost or won
    apart, a knob the launcher does not evaluate per call)."""
    params = parent.get("params") or {}
    knobs = params.get("knobs") or {}
    if parent.get("mutator") != "rewrite" or params.get("transform") not in SPLIT or len(knobs) != 1:
        return None
    shapes = _verdict_shapes(parent)
    if shapes is None:
        return None
    lost = [s["ci95"][1] < 1.0 for s in shapes]
    won = [s["ci95"][0] > 1.0 for s in shapes]
    if not any(lost) or not any(won):  # checked before the space is built (sizes from the harness)
        return None
    (knob, _), = knobs.items()
    space = ConfigSpace(dataclasses.replace(task, base_code=parent["code"]), device=device)
    tabled = [t for t in space.tabled if t.key.rsplit(":", 1)[-1] == knob]
    if len(tabled) != 1 or space.sizes is None or len(space.shapes) != len(shapes):
        return None
    key = tabled[0].key
    rows = []
    for cell in space.cells:
        members = [i for i, c in enumerate(space.cell_of) if c == cell]
        row = {t.key: space.base_values[t.key] for t in space.tabled}
        if members and all(lost[i] for i in members):
            row[key] = OFF
        rows.append(row)
    off = [r[key] == OFF for r in rows]
    kept = [i for i, c in enumerate(space.cell_of) if not off[space.cells.index(c)]]
    if not any(off) or not any(won[i] for i in kept):
        return None
    table = space.table_of(rows)
    new = {"op": "split", "on": parent["id"], "values": dict(space.base_values), "table": table,
           "changed": {f"{key}@{k}": [space.base_values[key], OFF] for k, r in enumerate(table["rows"])
                       if r[key] == OFF}}
    space.name = "params"  # the proposal's mutator and its description are the params search's
    return space.proposal(new, known, parent)
