"""Comment: a `/kernelsmith` command from a user the gate let through → its answer, and the work
item it queues (optimize, rebase) or nothing (help, ignore, an invalid command).
A new command: its grammar and help line in bot/commands.py, its branch in `answer` below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelsmith.onboard.config import Target
from kernelsmith.onboard.state import set_ignored

from ..commands import HELP, Command, Invalid
from ..work import WorkItem
from . import rebase
from .replies import Reply, keep, run_link, text

if TYPE_CHECKING:
    from ..context import Context


def answer(ctx: Context, asked: Command | Invalid, repo, repo_name: str, issue,
           reply: Reply) -> list[WorkItem]:
    """Answer a permitted user's command in `reply`; the work it queues."""
    if isinstance(asked, Invalid):
        reply.set(text("invalid", message=asked.message), HELP)
        return []
    if asked.name == "help":
        reply.set(text("help"), HELP)
        return []
    targets = _targets_for(ctx, repo_name)
    pr = marker = None
    if asked.name == "rebase":
        found_pr = rebase.find_pr(repo, issue, reply)
        if found_pr is None:
            return []
        pr, marker, cmd_target, cmd_op = found_pr
    else:
        cmd_op, cmd_target = asked.op, None
    found = [(t, o) for t in targets for o in t.operators
             if o.name == cmd_op and cmd_target in (None, t.name)]
    # An operator of the repo's own .kernelsmith.yml carries the repo name as its branch target.
    found = found or [(t, o) for t in targets for o in t.operators if o.name == cmd_op]
    if not found:
        known = ", ".join(f"`{o.name}`" for t in targets for o in t.operators) or "none"
        reply.set(text("unknown_operator", op=cmd_op, known=known), HELP)
        return []
    target, op = found[0]
    if asked.name == "ignore":
        ctx.pull_state({target.repo})
        set_ignored(ctx.state, target.name, op.name, True)
        ctx.push_state({target.repo})
        reply.set(text("ignored", op=op.name))
        return []
    if asked.name == "rebase":
        return rebase.queue(ctx, reply, repo_name, target, op, pr, marker)
    reply.set(text("queued", command=asked.describe(), target=target.name, op=op.name,
                   run_link=run_link(ctx.env.run_url)))
    keep(ctx, target.name, op.name, reply)
    return [WorkItem(target.name, op.name, asked.budget, asked.minutes, target.repo,
                     dict(reply.ref(), repo=repo_name))]


def _targets_for(ctx: Context, repo_name: str) -> list[Target]:
    """Targets of the repo the comment is in; all targets when the bot lives in its own repo."""
    all_targets = ctx.targets()
    mine = [t for t in all_targets if t.repo == repo_name]
    return mine or all_targets
