"""A candidate of a run: one archive row, decoded once (search/archive.py), with its Verdict.

The search reads a candidate's typed fields and asks it the verdict rules (referee/verdict.py:
trusted speedup, noisy, per-shape timings usable) instead of re-deriving them from dict keys.
A Candidate is also a read-only mapping over the archive's column names (`c["parent_id"]`,
`c["verdict"]` as stored JSON), the view prompts, exports, mutators' sync and tests read rows by.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kernelsmith.referee.verdict import Verdict, is_noisy, shape_timings_usable, speedup_to_trust

MALFORMED = "malformed_proposal"
# Mutators whose code kernelsmith renders from the base's own by setting its launch values (one
# config, or a per-shape table of them): no model writes it (the referee keeps its worker after
# such a candidate's honest failure, referee.HONEST_FAILURES).
RENDERED_MUTATORS = ("params", "grid")


@dataclass(frozen=True, eq=False)
class Candidate(Mapping):
    """One proposal (or the base, mutator "base") and what the referee said about it."""

    id: int
    parent_id: int | None
    code: str | None
    diff: str | None
    mutator: str
    island: int
    generation: int
    verdict: Verdict | None  # None while pending
    status: str  # "pending" | "evaluated" | "duplicate"
    depth: str | None  # the archive's timing column: "none" | "screen" | "full" (None while pending)
    speedup: float | None  # the verdict's geomean, as the archive's speedup column holds it
    accepted: bool
    reason: str | None
    params: dict | None
    row: dict = field(repr=False)  # every column, JSON decoded: the mapping view

    @classmethod
    def from_row(cls, row: Mapping) -> Candidate:
        """Decode an archive row (its columns as a dict, JSON columns already decoded)."""
        row = dict(row)
        data = row.get("verdict")
        return cls(
            id=row.get("id"), parent_id=row.get("parent_id"), code=row.get("code"), diff=row.get("diff"),
            mutator=row.get("mutator"), island=int(row.get("island") or 0),
            generation=int(row.get("generation") or 0),
            verdict=Verdict.from_json(data) if isinstance(data, dict) else None,
            status=row.get("status"), depth=row.get("timing"), speedup=row.get("speedup"),
            accepted=bool(row.get("accepted")), reason=row.get("reason"), params=row.get("params"), row=row,
        )

    @classmethod
    def of(cls, row: Mapping) -> Candidate:
        """`row` itself when it is a Candidate, else decoded (rows built by hand: tests, old callers)."""
        return row if isinstance(row, Candidate) else cls.from_row(row)

    def with_columns(self, **columns) -> Candidate:
        """A copy with some archive columns replaced (decoded again, so fields and view agree)."""
        return Candidate.from_row({**self.row, **columns})

    # -- the mapping view (archive column names) -------------------------------------------------
    def __getitem__(self, key: str):
        return self.row[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.row)

    def __len__(self) -> int:
        return len(self.row)

    def __eq__(self, other) -> bool:
        if isinstance(other, Candidate):
            return self.row == other.row
        return isinstance(other, Mapping) and self.row == dict(other)

    __hash__ = None  # a row's columns, like a dict's, are not hashable

    def __reduce__(self):  # pickles as its columns (Ray ships rows to remote workers)
        return (Candidate.from_row, (self.row,))

    def __copy__(self) -> Candidate:
        return Candidate.from_row(self.row)

    # -- what the search asks ------------------------------------------------------------------
    @property
    def is_base(self) -> bool:
        """The base's own row (evaluated against itself)."""
        return self.mutator == "base"

    @property
    def rendered(self) -> bool:
        """Kernelsmith wrote its code from the base's by setting launch values (RENDERED_MUTATORS);
        a params retune of a model's rewrite (params "on") is that model's code."""
        return self.mutator in RENDERED_MUTATORS and not (self.params or {}).get("on")

    @property
    def evaluated(self) -> bool:
        """The referee ran it, or it was rejected before (malformed)."""
        return self.status == "evaluated"

    @property
    def malformed(self) -> bool:
        """The proposal held no usable code."""
        return self.reason == MALFORMED

    @property
    def referee_ran(self) -> bool:
        """A proposal the referee evaluated (not the base, not malformed, not a duplicate)."""
        return not self.is_base and self.evaluated and not self.malformed

    @property
    def noisy(self) -> bool:
        """Its measurement's A/A control strayed (referee/timing.py aa_strayed): no evidence either way."""
        return is_noisy(self.verdict)

    @property
    def trusted_speedup(self) -> float | None:
        """The geomean a decision may rest on: accepted, fully timed, not noisy (else None)."""
        return speedup_to_trust(self.accepted, self.speedup, self.noisy, self.depth)

    @property
    def timed(self) -> bool:
        """Its verdict was timed (a row without a verdict's `timed` key: when it has a speedup)."""
        return bool(self.verdict_json.get("timed", self.speedup is not None))

    @property
    def measured_speedup(self) -> float | None:
        """Its geomean when timed at any depth and not noisy (export's gains); else None."""
        # A verdict without the `timed` key (older rows) had a speedup only when it was timed.
        timed = self.verdict_json.get("timed", True)
        return self.speedup if self.speedup is not None and timed and not self.noisy else None

    @property
    def shape_timings_usable(self) -> bool:
        """Its per-shape speedups may be read: accepted, timed at any depth, not noisy."""
        return shape_timings_usable(self.accepted, bool(self.verdict and self.verdict.timed), self.noisy)

    @property
    def verdict_json(self) -> dict:
        """The verdict as stored ({} while pending)."""
        return self.row.get("verdict") or {}


def candidates(rows) -> list[Candidate]:
    """`Candidate.of` every row."""
    return [Candidate.of(r) for r in rows]
