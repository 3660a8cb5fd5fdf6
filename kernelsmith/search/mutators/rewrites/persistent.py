"""Persistent launch: SMs x k programs, each looping over the former programs' work items.

The grid (every axis) becomes one axis of `min(work items, num_sms * PERSISTENT_GROUP)` programs;
the new kernel walks the flattened work items with a grid stride (`tl.range(program_id, items,
num_programs)`), splits each back into its former program ids (axis 0 fastest, the order the
hardware launches them in) and calls the old body. The SM count is read from
`torch.cuda.get_device_properties` at call time (4 without CUDA, e.g. under the interpreter).
k is the knob `PERSISTENT_GROUP`, a literal in the launcher that the params search tunes.
"""

from __future__ import annotations

from kernelsmith.search.mutators.rewrites import MARK, Rewrite
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site
from kernelsmith.search.mutators.rewrites.explain import sentence
from kernelsmith.search.mutators.rewrites.wrap import KernelWrap, apply, free_name, module_alias, paren

KNOB = "PERSISTENT_GROUP"
CPU_SMS = 4  # the SM count assumed without CUDA (the interpreter runs programs one at a time anyway)


def persistent(site: Site, per_sm: int) -> Rewrite:
    """`site`'s kernel launched persistently with `per_sm` programs per SM."""
    if module_alias(site.tree, "torch") != "torch":
        raise Decline("the file does not import torch (the SM count comes from torch.cuda)")
    axes = list(range(len(site.grid)))
    if not axes:
        raise Decline(f"{site.kernel.name}: an empty grid")
    wrap = KernelWrap(site, axes)
    tl, count = wrap.tl, wrap.count
    knob, sms = free_name(site, KNOB), free_name(site, "num_sms")
    item = "item" if "item" not in set(wrap.params) | set(count.values()) else "item_"
    pids, stride = {}, ""
    for a in axes:
        part = f"{item} // {stride}" if stride else item
        pids[a] = f"{part} % {count[a]}" if a < axes[-1] else part
        stride = f"{stride} * {count[a]}" if stride else count[a]
        stride = f"({stride})" if " * " in stride and not stride.startswith("(") else stride
    total = " * ".join(count[a] for a in axes)
    body = (
        f"    {MARK} persistent launch, each program loops over the former programs' work\n"
        f"    for {item} in {tl}.range({tl}.program_id(0), {total}, {tl}.num_programs(0)):\n"
        f"{wrap.helper_call(pids, ' ' * 8)}\n"
    )
    edits = wrap.kernel_edits([], body)
    sizes = [site.launch_size(a) for a in axes]  # the grid (a lambda too) becomes a tuple
    items = " * ".join(paren(s) for s in sizes) if len(sizes) > 1 else sizes[0]
    edits += wrap.launch_edits(
        f"(min({items}, {sms} * {knob}),)",
        [f"{count[a]}={s}" for a, s in zip(axes, sizes, strict=True)],
        [
            f"{knob} = {per_sm}  # kernelsmith: resident programs per SM of the persistent launch",
            f"{sms} = {CPU_SMS}  # without CUDA (the interpreter)",
            "if torch.cuda.is_available():",
            f"    {sms} = torch.cuda.get_device_properties(torch.cuda.current_device())"
            ".multi_processor_count",
        ],
    )
    explain = sentence("persistent", site.kernel.name, None, {knob: per_sm})
    return Rewrite("persistent", site.kernel.name, apply(site.code, edits), explain, None, {knob: per_sm})
