"""Mutators turn a parent candidate (and inspirations) into proposals: params, rewrite and grid (no
LLM), llm (an OpenAI-compatible model) and replay (an earlier winner's diff).

This module is the one registry of mutator names: the `--mutator` choices of `optimize` and
`bench`, what "all" runs, and which of them need the LLM broker. A new mutator implements
`Mutator`, gets a name here and a branch in `search.loop.build_mutators`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from kernelsmith.search.candidate import Candidate


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


@runtime_checkable
class Mutator(Protocol):
    """What the search loop asks of a mutator."""

    name: str  # recorded in each proposal's archive row (its `mutator` column)

    def sync(self, rows: list[Candidate]) -> None:
        """Catch up with the archive rows the current generation may see (resume included). Rows
        are Candidates (search/candidate.py); read their fields and rules, or their columns by name."""

    def propose(self, parent: Candidate, inspirations: list[Candidate], rng: random.Random,
                known: set[str] | None = None) -> Proposal | list[Proposal] | None:
        """A proposal for `parent` (the llm mutator: a list, its fix requests included); None when
        it has nothing new. `known`: code hashes already in the archive."""


# The mutators "all" runs, in the order the loop holds them (it shuffles them per slot).
ALL = ("params", "rewrite", "llm")
# `--mutator` values of `optimize` and `bench`: one mutator each, "all", or the plain grid sweep
# (a baseline). "replay" is no choice: `--replay` sets it.
CHOICES = ("params", "llm", "rewrite", "all", "grid")
DEFAULT = "all"
CHOICES_HELP = ("params (no LLM), llm, rewrite (structural rewrites, no LLM), all (all three; the "
                "default), or grid (plain sweep, a baseline)")


def members(name: str) -> tuple[str, ...]:
    """The mutators a `--mutator` value (or run.json's `mutator`) stands for."""
    return ALL if name == "all" else (name,)


def uses_llm(name: str | None) -> bool:
    """Whether a `--mutator` value (None: the default) asks a model (and so needs the broker)."""
    return "llm" in members(DEFAULT if name is None else name)
