"""Optimize (`kernelsmith-bot run --stage all` only; in the workflow it is the GPU job): one work
item's `kernelsmith optimize` and `verify`, in subprocesses that hold no GitHub credential."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .replies import reply_for, run_link, text

if TYPE_CHECKING:
    from ..context import Context
    from ..work import WorkItem


def run(ctx: Context, item: WorkItem) -> Path:
    """Optimize (or replay) and verify one item; its run directory, for the publish phase."""
    reply = reply_for(ctx, item)
    if reply:
        doing = "running_rebase" if item.replay is not None else "running"
        reply.set(text(doing, run_link=run_link(ctx.env.run_url)))
    out = ctx.runs_dir / item.slug
    if out.exists():  # an earlier run on a long-lived runner: keep it, start afresh
        out.rename(_aside(out))
    target = ctx.target(item.target)
    if item.replay is not None:
        # Beside the run directories but under a name no slug can take (names start alphanumeric).
        diff = ctx.runs_dir / ".replay" / f"{item.slug}.diff"
        diff.parent.mkdir(parents=True, exist_ok=True)
        diff.write_text(item.replay)
        code = ctx.engine.optimize(target.path, item.op, out, None, item.minutes, replay=diff)
    else:
        code = ctx.engine.optimize(target.path, item.op, out, item.budget, item.minutes)
    if code == 0:
        ctx.engine.verify(out)
    return out


def _aside(path: Path) -> Path:
    """A free name beside `path` (stamped with its mtime) to keep an earlier run directory."""
    stamp, n = int(path.stat().st_mtime), 0
    aside = path.with_name(f"{path.name}.{stamp}")
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.{stamp}-{n}")
    return aside
