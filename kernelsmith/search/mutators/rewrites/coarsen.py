"""Program coarsening: each program does the work of F consecutive programs along one grid axis.

The new kernel runs an unrolled `tl.static_range(F)` loop over the former program ids of that axis,
skips those past the original grid, and calls the old body for each; the grid along the axis is
divided by F (rounded up). F is the knob `COARSEN_GROUP`, a literal in the launcher that the params
search tunes (it feeds the grid and the launch argument, so both always agree).
"""

from __future__ import annotations

from kernelsmith.search.mutators.rewrites import MARK, Rewrite
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site, pid_calls
from kernelsmith.search.mutators.rewrites.explain import sentence
from kernelsmith.search.mutators.rewrites.wrap import KernelWrap, apply, constexpr, free_name

KNOB = "COARSEN_GROUP"


def coarsen(site: Site, axis: int, factor: int) -> Rewrite:
    """`site`'s kernel with `factor` former programs of grid axis `axis` per program."""
    if axis >= len(site.grid):
        raise Decline(f"{site.kernel.name}: no grid axis {axis}")
    if axis not in {a for _, a, what in pid_calls(site.kernel) if what == "program_id"}:
        raise Decline(f"{site.kernel.name}: never reads its program id along axis {axis}")
    wrap = KernelWrap(site, [axis])
    tl, count = wrap.tl, wrap.count[axis]
    knob = free_name(site, KNOB)
    taken = set(wrap.params) | {count, knob}
    i, pid = _local("i", taken), _local("pid", taken)
    body = (
        f"    {MARK} each program does the work of {knob} programs of grid axis {axis}\n"
        f"    for {i} in {tl}.static_range({knob}):\n"
        f"        {pid} = {tl}.program_id({axis}) * {knob} + {i}\n"
        f"        if {pid} < {count}:\n"
        f"{wrap.helper_call({axis: pid}, ' ' * 12)}\n"
    )
    edits = wrap.kernel_edits([f"{knob}: {constexpr(site)}"], body)
    line = f"{knob} = {factor}  # kernelsmith: programs merged into one along grid axis {axis}"
    edits += wrap.divide_axis(axis, knob, count, line)
    explain = sentence("coarsen", site.kernel.name, axis, {knob: factor})
    return Rewrite("coarsen", site.kernel.name, apply(site.code, edits), explain, axis, {knob: factor})


def _local(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name
