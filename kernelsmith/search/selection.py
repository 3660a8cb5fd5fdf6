"""Selection: elites and a MAP-Elites diversity grid per island, parent and inspiration sampling,
and ring migration between islands.

The grid's feature axes say something about a kernel: its launch configuration class (largest
num_warps), its tiling (largest block size, log scale) and its code size relative to the base
(a rewrite versus a retune). Everything is rebuilt from archive rows, so `--resume` sees the
population exactly as it was.
"""

from __future__ import annotations

import functools
import math
import random
import re
from dataclasses import dataclass

from kernelsmith.referee.verdict import subset_geomean
from kernelsmith.search.candidate import Candidate

_WARPS = re.compile(r"\bnum_warps\b\s*[=:]\s*[\"']?\s*(\d+)")
_BLOCK = re.compile(r"\b\w*(?:BLOCK|TILE)\w*\b[\"']?\s*[=:]\s*(\d+)\b", re.I)


@dataclass
class SelectionConfig:
    """How parents and inspirations are drawn."""

    islands: int = 4
    exploit: float = 0.7  # share of parents drawn from the elites (the rest: the diversity grid)
    elite_size: int = 5
    top_inspirations: int = 2
    diverse_inspirations: int = 2
    migrate_every: int = 3  # generations between migrations


@functools.lru_cache(maxsize=8192)  # every row's, on every generation's rebuild (regexes over the code)
def features(code: str, base_lines: int) -> tuple[int, int, int]:
    """(launch class, tiling class, size class) of a candidate's code, the grid cell it lands in."""
    warps = [int(x) for x in _WARPS.findall(code)]
    launch = int(math.log2(max(warps))) + 1 if warps and max(warps) > 0 else 0
    blocks = [int(x) for x in _BLOCK.findall(code) if int(x) > 0]
    tiling = int(math.log2(max(blocks))) // 2 + 1 if blocks else 0
    ratio = len(code.strip().splitlines()) / max(1, base_lines)
    size = 0 if ratio < 0.9 else 1 if ratio <= 1.1 else 2 if ratio <= 1.5 else 3
    return launch, tiling, size


def fitness(row) -> float | None:
    """Selection score of a Candidate (or its columns as a dict): geomean speedup when timed, 1.0
    for accepted without timing; None if rejected."""
    c = Candidate.of(row)
    if c.is_base and c.status == "pending":
        return 1.0  # the reference, while the referee judges it (the first generations' parent)
    if not c.accepted or not c.evaluated:
        return None
    if c.noisy:
        return 1.0  # a noisy number is no evidence either way
    if c.verdict is not None and c.verdict.depth == "screen_subset":
        # Timed on a few shapes only and behind the best there: not faster than the base, and its
        # subset geomean is never ranked against all-shape ones (referee/staging.py).
        return min(1.0, subset_geomean(c.verdict) or 1.0)
    return float(c.speedup) if c.speedup is not None else 1.0


class Population:
    """The islands: members, elites and a MAP-Elites grid each, rebuilt from archive rows."""

    def __init__(self, config: SelectionConfig, base_code: str):
        self.config = config
        self.base_lines = len(base_code.strip().splitlines())
        self.rows: dict[int, Candidate] = {}
        self.members: list[set[int]] = [set() for _ in range(max(1, config.islands))]
        self.cells: dict[int, tuple[int, int, int]] = {}

    @property
    def n_islands(self) -> int:
        """Number of islands."""
        return len(self.members)

    def add(self, row) -> None:
        """Add an evaluated candidate (the base joins every island); rejected ones are ignored."""
        c = Candidate.of(row)
        if fitness(c) is None or not c.code:
            return
        self.rows[c.id] = c
        self.cells[c.id] = features(c.code, self.base_lines)
        if c.is_base:
            for m in self.members:
                m.add(c.id)
        else:
            self.members[c.island % self.n_islands].add(c.id)

    def rebuild(self, rows: list[Candidate], migrations: list[tuple[int, int, int]]) -> None:
        """Reset from archive rows and recorded migrations."""
        self.rows.clear()
        self.cells.clear()
        for m in self.members:
            m.clear()
        for row in rows:
            self.add(row)
        for _gen, cid, to_island in migrations:
            if cid in self.rows:
                self.members[to_island % self.n_islands].add(cid)

    def _ranked(self, ids) -> list[Candidate]:
        # Best first; among equals the newest first, so untimed runs keep moving forward.
        return sorted((self.rows[i] for i in ids), key=lambda c: (-fitness(c), -c.id))

    def elites(self, island: int) -> list[Candidate]:
        """The island's best members."""
        return self._ranked(self.members[island % self.n_islands])[: self.config.elite_size]

    def grid(self, island: int) -> dict[tuple[int, int, int], Candidate]:
        """The island's MAP-Elites grid: the best member of every occupied feature cell."""
        cells: dict[tuple[int, int, int], Candidate] = {}
        for c in self._ranked(self.members[island % self.n_islands]):
            cells.setdefault(self.cells[c.id], c)
        return cells

    def best(self) -> Candidate | None:
        """The best row over all islands."""
        ranked = self._ranked(self.rows)
        return ranked[0] if ranked else None

    def sample(self, island: int, rng: random.Random) -> tuple[Candidate, list[Candidate]]:
        """(parent, inspirations) for one proposal on `island`."""
        elites = self.elites(island)
        if not elites:
            raise RuntimeError("the population is empty: the base itself was not accepted")
        grid = self.grid(island)
        if rng.random() < self.config.exploit or len(grid) < 2:
            weights = [1.0 / (rank + 1) for rank in range(len(elites))]
            parent = rng.choices(elites, weights=weights)[0]
        else:
            parent = grid[rng.choice(sorted(grid))]
        ranked = [c for c in self._ranked(self.rows) if c.id != parent.id]
        chosen = ranked[: self.config.top_inspirations]
        taken = {parent.id, *(c.id for c in chosen)}
        parent_cell = self.cells[parent.id]
        others = [c for cell, c in sorted(grid.items()) if cell != parent_cell and c.id not in taken]
        rng.shuffle(others)
        chosen += others[: self.config.diverse_inspirations]
        return parent, chosen

    def migrate(self, generation: int) -> list[tuple[int, int]]:
        """Ring migration: each island's best joins the next island. Returns (id, to_island) pairs."""
        if self.n_islands < 2 or generation % max(1, self.config.migrate_every):
            return []
        moves = []
        for i in range(self.n_islands):
            elites = self.elites(i)
            if elites and not elites[0].is_base:
                to = (i + 1) % self.n_islands
                if elites[0].id not in self.members[to]:
                    moves.append((elites[0].id, to))
        for cid, to in moves:
            self.members[to].add(cid)
        return moves
