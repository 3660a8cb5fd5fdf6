"""What a finished search hands its caller: the run directory and result.json's content."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SearchResult:
    """A finished search: `data` is result.json's content, already written under `run_dir`."""

    run_dir: Path
    data: dict

    @property
    def winner(self) -> dict | None:
        """result.json's winner (id, parent, file, diff), None when the run ended without one."""
        return self.data.get("winner")

    @property
    def timed(self) -> bool:
        """Whether candidates were timed (False under the Triton interpreter)."""
        return bool(self.data.get("timed"))
