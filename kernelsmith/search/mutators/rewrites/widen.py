"""Tile widening: R programs of one grid axis become one program working on [R, BLOCK] tiles.

Where a kernel handles one row (a token, a head) per program with 1-D tiles, the program id of that
axis becomes a vector of R row ids (`rows`), and the tree is walked once to give every value a
kind: uniform (S), per row ([R]), per column ([BLOCK], from `tl.arange`) or tile ([R, BLOCK]).
Where kinds meet, operands are broadcast (`x[:, None]`, `c[None, :]`), reductions along the
tile's old axis 0 move to axis 1, per-row conditional expressions become `tl.where`, and every load
and store that now depends on the row gets the row guard (`rows < num_programs`) in its mask. The
grid along the axis is divided by R (rounded up); R is the knob `ROWS_GROUP`, tuned by params.

It declines what it cannot follow: a kernel that already has 2-D tiles, branches or loop bounds
that depend on the row, accumulators whose shape would change, early returns, helper calls with
per-row arguments, and any call whose broadcasting it does not know.
"""

from __future__ import annotations

import ast

from kernelsmith.search.mutators.rewrites import MARK, Rewrite
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site
from kernelsmith.search.mutators.rewrites.explain import sentence
from kernelsmith.search.mutators.rewrites.shapes import KNOB, Grow, S, ShapeWalk, join
from kernelsmith.search.mutators.rewrites.wrap import apply, constexpr


def widen(site: Site, axis: int, rows: int) -> Rewrite:
    """`site`'s kernel with `rows` programs of grid axis `axis` merged into one [rows, ...] tile."""
    if axis >= len(site.grid):
        raise Decline(f"{site.kernel.name}: no grid axis {axis}")
    if rows & (rows - 1) or rows < 1:
        raise Decline(f"{KNOB} must be a power of two (tl.arange), not {rows}")
    kernel = site.kernel
    body = kernel.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    force: dict[str, str] = {}
    for _ in range(12):
        w = ShapeWalk(site, axis, force)
        try:
            w.block(body)
            break
        except Grow as grow:
            if force.get(grow.name) == grow.kind:
                raise Decline(f"`{grow.name}` keeps changing shape around a loop") from None
            force[grow.name] = join(force.get(grow.name, S), grow.kind)
    else:
        raise Decline("too many loop-carried values change shape")
    if not w.widened:
        raise Decline(f"{kernel.name}: no load or store depends on the program id of axis {axis}")
    tl, count, knob = w.tl, w.count, w.knob
    edits = [(s, e, t) for (s, e), t in w.edits.items()]
    indent = " " * body[0].col_offset
    at = site.line_start(body[0].lineno)
    edits.append((at, at, (
        f"{indent}{MARK} {knob} programs of grid axis {axis} as one tile of {knob} rows\n"
        f"{indent}{w.rows} = {tl}.program_id({axis}) * {knob} + {tl}.arange(0, {knob})\n"
        f"{indent}{w.ok} = {w.rows} < {count}\n"
    )))
    plain = kernel.args.args[: w.wrap.n_plain]
    last = plain[-1]
    end = site.span(last)[1]
    line = site.code.splitlines()[last.lineno - 1]
    new = [count, f"{knob}: {constexpr(site)}"]
    if line[: last.col_offset].strip() == "" and last.lineno > kernel.lineno:
        sep = ",\n" + " " * last.col_offset
        edits.append((end, end, sep + sep.join(new)))
    else:
        edits.append((end, end, ", " + ", ".join(new)))
    line = f"{knob} = {rows}  # kernelsmith: rows of grid axis {axis} per program, one [rows, ...] tile"
    edits += w.wrap.divide_axis(axis, knob, count, line)
    explain = sentence("widen", kernel.name, axis, {knob: rows})
    return Rewrite("widen", kernel.name, apply(site.code, edits), explain, axis, {knob: rows})
