"""Schedule (and workflow_dispatch): the stale, watched operators of every target (or the one
asked for), within each target's per-run budget of minutes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelsmith.errors import KernelsmithError
from kernelsmith.onboard.state import entry, staleness

from .. import prs
from ..work import WorkItem

if TYPE_CHECKING:
    from ..context import Context

DEFAULT_OP_MINUTES = 30.0
DEFAULT_RUN_MINUTES = 60.0


def plan(ctx: Context, inputs: dict) -> list[WorkItem]:
    """The work list of a scheduled run; `inputs` (workflow_dispatch) may name a target, op, budget."""
    only_target, only_op = inputs.get("target") or None, inputs.get("op") or None
    budget = int(inputs["budget"]) if str(inputs.get("budget") or "").strip() else None
    targets = [t for t in ctx.targets() if only_target in (None, t.name)]
    if only_target and not targets:
        raise KernelsmithError(f"no target named {only_target!r} in {ctx.targets_dir}")
    ctx.pull_state({t.repo for t in targets})
    items = []
    for t in targets:
        scan = ctx.engine.scan(t.path)
        ctx.scans[t.name] = scan
        left = t.budget_minutes or DEFAULT_RUN_MINUTES
        for row in scan.get("operators", []):
            name = row.get("name")
            if only_op and name != only_op:
                continue
            stale, why = staleness(ctx.state, t.name, name, row.get("source_hash") or "")
            ignored = entry(ctx.state, t.name, name).get("ignored")
            asked = only_op is not None
            closed = prs.declined(entry(ctx.state, t.name, name), row.get("source_hash"))
            if closed and not asked:
                ctx.log(f"{t.name}/{name}: PR #{closed.get('number')} was closed without merging at "
                        "this source; not proposed again until the source changes")
                continue
            skip = (ignored or not stale) and not asked
            if not row.get("harness_ok", True) or skip:
                continue
            minutes = min(DEFAULT_OP_MINUTES, left)
            if minutes <= 0:
                ctx.log(f"{t.name}/{name}: stale ({why}) but over this run's budget; next run")
                continue
            left -= minutes
            items.append(WorkItem(t.name, name, budget, minutes, t.repo, None, row.get("source_hash"), [why]))
    return items
