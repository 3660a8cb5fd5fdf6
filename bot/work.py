"""What the bot's stages hand each other: a work item (one operator to optimize, verify and
publish) and the reply comment it edits as the work goes on."""

from __future__ import annotations

from dataclasses import dataclass, field


class Reply:
    """The bot's one answer to a command comment, edited as the work progresses."""

    def __init__(self, issue, header: str, comment=None):
        self.issue, self.header, self.comment = issue, header, comment

    def set(self, status: str, text: str = "") -> None:
        body = f"{self.header}\n\n{status}" + (f"\n\n{text}" if text else "")
        if self.comment is None:
            self.comment = self.issue.create_comment(body)
        elif self.comment.body != body:
            self.comment.edit(body)

    def ref(self) -> dict:
        """Enough to find this comment again in a later job."""
        return {"issue": self.issue.number, "comment": self.comment.id if self.comment else None}


@dataclass
class WorkItem:
    """One operator to optimize, verify and publish."""

    target: str
    op: str
    budget: int | None = None
    minutes: float | None = None
    repo: str | None = None
    reply: dict | None = None
    source_hash: str | None = None
    notes: list[str] = field(default_factory=list)
    replay: str | None = None  # a rebase: the PR's winner diff, re-applied to the current base
    pr: int | None = None      # the PR a rebase updates

    @property
    def slug(self) -> str:
        return f"{self.target}-{self.op}"
