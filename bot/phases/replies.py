"""The bot's one reply comment per command (`Reply`) and its texts, kept in replies.md."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..context import Context
    from ..work import WorkItem

TEMPLATES = Path(__file__).with_name("replies.md")
_SECTION_RE = re.compile(r"^## ([a-z_]+)\n", re.M)


@cache
def templates() -> dict[str, str]:
    """Every reply text of replies.md by name (the `## name` sections; the preface is skipped)."""
    parts = _SECTION_RE.split(TEMPLATES.read_text(encoding="utf-8"))
    return {name: body.strip("\n") for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def text(name: str, **fields) -> str:
    """The reply text `name` with its `{fields}` filled in."""
    return templates()[name].format(**fields)


def run_link(url: str | None) -> str:
    """` ([workflow run](url))` appended to a status line, or nothing without a run URL."""
    return " " + text("run_link", url=url) if url else ""


class Reply:
    """The bot's one answer to a command comment, edited as the work progresses."""

    def __init__(self, issue, header: str, comment=None):
        self.issue, self.header, self.comment = issue, header, comment

    def set(self, status: str, text: str = "") -> None:
        """Show `status` (and `text` below it) under the header: the first call comments, later ones edit."""
        body = f"{self.header}\n\n{status}" + (f"\n\n{text}" if text else "")
        if self.comment is None:
            self.comment = self.issue.create_comment(body)
        elif self.comment.body != body:
            self.comment.edit(body)

    def ref(self) -> dict:
        """Enough to find this comment again in a later job."""
        return {"issue": self.issue.number, "comment": self.comment.id if self.comment else None}


def keep(ctx: Context, target: str, op: str, reply: Reply) -> None:
    """Remember the reply of `target/op`, so that the later phases of this run edit that comment."""
    ctx.replies[(target, op)] = reply


def reply_for(ctx: Context, item: WorkItem) -> Reply | None:
    """The reply comment of a work item (found again from its reference in a later job)."""
    if item.reply is None or item.reply.get("comment") is None or ctx.dry_run:
        return None
    key = (item.target, item.op)
    if key not in ctx.replies:
        repo = ctx.auth.repo(item.reply["repo"])
        issue = repo.get_issue(item.reply["issue"])
        comment = issue.get_comment(item.reply["comment"])
        header = comment.body.split("\n\n", 1)[0]
        ctx.replies[key] = Reply(issue, header, comment)
    return ctx.replies[key]
