"""What the bot's phases hand each other: a work item, one operator to optimize, verify and publish.
The gate job writes the list as JSON (a job output); the publish job reads it back."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


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
        """`<target>-<op>` with every `-` of the target doubled: the run directory's (and the
        workflow's artifact's) name, one per (target, op). An operator name starts with a letter
        or digit, so the first lone `-` ends the target: `demo` + `x-rms_norm` is `demo-x-rms_norm`,
        `demo-x` + `rms_norm` is `demo--x-rms_norm`."""
        return f"{self.target.replace('-', '--')}-{self.op}"


def to_json(items: list[WorkItem]) -> str:
    """The work list as the gate job's output (each item with its `slug`, for the workflow)."""
    return json.dumps([dict(asdict(i), slug=i.slug) for i in items])


def from_json(text: str | None) -> list[WorkItem]:
    """The work list from the gate job's output (empty when there is none); the slug is derived
    again from target and operator, never read."""
    return [WorkItem(**{k: v for k, v in d.items() if k != "slug"}) for d in json.loads(text or "[]")]
