"""KernelBench's metrics, as its `src/score.py` and `scripts/benchmark_eval_analysis.py` define them.

- correctness rate: correct tasks / all tasks (a task without a result counts as incorrect);
- fast_p: tasks that are correct AND have speedup strictly greater than p, divided by ALL tasks
  (so fast_0 is the correctness rate, and an incorrect task never counts as fast);
- mean speedup: the geometric mean of the speedup over the correct tasks only, with slowdowns
  (speedup < 1) kept as they are, neither clamped to 1 nor dropped; 0 when no task is correct.
Speedup is the PyTorch reference's time divided by the solution's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import geometric_mean

FAST_P = (1.0, 1.2)


@dataclass
class TaskScore:
    """One task's outcome: correct (accepted by the referee) and, when timed, its speedup."""

    task: str
    correct: bool
    speedup: float | None = None
    reason: str | None = None
    detail: dict = field(default_factory=dict)


def correctness_rate(scores: list[TaskScore]) -> float:
    """Correct tasks over all tasks (0 for an empty set)."""
    return sum(s.correct for s in scores) / len(scores) if scores else 0.0


def fast_p(scores: list[TaskScore], p: float) -> float | None:
    """Share of ALL tasks that are correct with speedup > p; None when a correct task was not timed."""
    if not scores:
        return 0.0
    correct = [s for s in scores if s.correct]
    if any(s.speedup is None for s in correct):
        return None
    return sum(s.speedup > p for s in correct) / len(scores)


def geomean_speedup(scores: list[TaskScore]) -> float | None:
    """Geometric mean speedup over correct tasks (slowdowns included as is); 0 if none is correct."""
    correct = [s for s in scores if s.correct]
    if not correct:
        return 0.0
    if any(s.speedup is None for s in correct):
        return None
    if any(s.speedup <= 0 for s in correct):
        raise ValueError("a speedup must be positive")
    return geometric_mean([s.speedup for s in correct])


def summarize(scores: list[TaskScore], ps: tuple[float, ...] = FAST_P) -> dict:
    """All metrics for a set of task scores; timing-dependent ones are None when nothing was timed."""
    timed = all(s.speedup is not None for s in scores if s.correct)
    return {
        "tasks": len(scores),
        "correct": sum(s.correct for s in scores),
        "correctness_rate": correctness_rate(scores),
        "fast_p": {f"{p:.1f}": fast_p(scores, p) for p in ps},
        "mean_speedup": geomean_speedup(scores),
        "timed": timed,
    }
