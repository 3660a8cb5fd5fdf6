"""Live progress of a search: a rich bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    """Generation, proposals against the budget, evaluations, best geomean, evaluations per minute."""

    def __init__(self, budget: int | None, *, live: bool = True, timed: bool = True, stream=None):
        self.stream = stream or sys.stderr
        self.budget = budget
        self.timed = timed
        self.generation = 0
        self.proposals = 0
        self.evaluations = 0
        self.accepted = 0
        self.best: float | None = None
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self._rich = None
        if live and getattr(self.stream, "isatty", lambda: False)():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._rich = RichProgress(
                TextColumn("[bold]gen {task.fields[gen]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._rich.add_task("search", total=budget, gen=0, stats="")
            self._rich.start()

    def rate(self) -> float:
        """Evaluations per minute since the start."""
        minutes = (time.monotonic() - self.start) / 60
        return self.evaluations / minutes if minutes > 0 else 0.0

    def _stats(self) -> str:
        best = "no timing" if not self.timed else (f"best {self.best:.3f}x" if self.best else "best -")
        return f"evals {self.evaluations} | accepted {self.accepted} | {best} | {self.rate():.1f} evals/min"

    def _refresh(self) -> None:
        if self._rich is not None:
            self._rich.update(self._task, completed=self.proposals, gen=self.generation, stats=self._stats())

    def set_generation(self, generation: int, proposals: int) -> None:
        """A new generation started; `proposals` recorded so far."""
        with self.lock:
            self.generation, self.proposals = generation, proposals
            self._refresh()

    def set_counts(self, proposals: int, evaluations: int, accepted: int, best: float | None) -> None:
        """Totals (from the archive on resume)."""
        with self.lock:
            self.proposals, self.evaluations, self.accepted, self.best = (
                proposals,
                evaluations,
                accepted,
                best,
            )
            self._refresh()

    def event(
        self, cid: int, mutator: str, summary: str, *, evaluated: bool, accepted: bool, best: float | None,
        generation: int | None = None,
    ) -> None:
        """One candidate settled (evaluated, duplicate or malformed), of `generation` (default: current)."""
        with self.lock:
            if evaluated:
                self.evaluations += 1
            if accepted:
                self.accepted += 1
            if best is not None:
                self.best = best if self.best is None else max(self.best, best)
            gen = self.generation if generation is None else generation
            line = f"[gen {gen}] #{cid} {mutator}: {summary} | {self._stats()}"
            if self._rich is not None:
                self._rich.console.print(line, highlight=False, markup=False)
                self._refresh()
            else:
                print(line, file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A plain message."""
        if self._rich is not None:
            self._rich.console.print(text, highlight=False, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the live display."""
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
