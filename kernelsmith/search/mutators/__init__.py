"""Mutators turn a parent candidate (and inspirations) into proposals: params (no LLM) and llm."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Proposal:
    """One mutator answer. `code` None with `error` set is a malformed proposal (still recorded)."""

    mutator: str
    parent_id: int | None
    code: str | None
    prompt: str | None = None
    response: str | None = None
    params: dict | None = None
    inspiration_ids: list[int] = field(default_factory=list)
    error: str | None = None
