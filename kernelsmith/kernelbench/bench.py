"""`kernelsmith bench`: score KernelBench-format tasks the way KernelBench scores generations."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.kernelbench.adapter import kernelbench_task, operator_name, write_task_folder
from kernelsmith.kernelbench.metrics import TaskScore, summarize
from kernelsmith.kernelbench.problem import Problem


def score_solution(problem: Problem, code: str | None, folder: Path, *, device: str = "auto",
                   dtype: str = "float32", seed: int = 0, missing: str = "missing_solution") -> TaskScore:
    """One task: the referee's verdict on `code` (None: no solution, scored as incorrect)."""
    from kernelsmith.referee import Referee

    if code is None:
        return TaskScore(problem.name, False, None, missing)
    # Only the referee runs it, whose worker loads the harness (and the problem file) in the sandbox.
    task = kernelbench_task(problem, folder, dtype, harness=None)
    started = time.monotonic()
    # One verdict: no spare worker (interpret's default) booting beside it, never to be used.
    with Referee(task, device=device, seed=seed, workdir=folder / "work", prefork=False) as referee:
        verdict = referee.evaluate(code, candidate_id=1, timing="full")
    speedup = verdict.geomean_speedup if (verdict.accepted and verdict.timed) else None
    detail = {
        "device": verdict.device, "timed": verdict.timed, "noisy": (verdict.timing or {}).get("noisy"),
        "violations": verdict.violations, "error": (verdict.error or "")[-400:] or None,
        "shapes": verdict.shapes, "eval_s": round(time.monotonic() - started, 2),
    }
    return TaskScore(problem.name, bool(verdict.accepted), speedup, verdict.reason, detail)


def score_solutions(problems: list[Problem], solutions: Path, workdir: Path, *, device: str = "auto",
                    dtype: str = "float32", seed: int = 0, progress=None,
                    missing: str = "missing_solution") -> list[TaskScore]:
    """Score `solutions`/<problem>.py for every problem (a missing file counts as incorrect)."""
    solutions = Path(solutions)
    if not solutions.is_dir():
        raise ConfigError(solutions, "solutions folder not found", "--solutions")
    scores = []
    for problem in problems:
        path = solutions / f"{problem.name}.py"
        code = path.read_text() if path.is_file() else None
        score = score_solution(problem, code, Path(workdir) / operator_name(problem), device=device,
                               dtype=dtype, seed=seed, missing=missing)
        scores.append(score)
        if progress:
            progress(score)
    return scores


def optimize_tasks(problems: list[Problem], out: Path, *, mutator: str, device: str = "auto",
                   dtype: str = "float32", budget: int | None = None, minutes: float | None = None,
                   seed: int = 0, progress=None) -> Path:
    """Run `optimize` on every task; copy each winner to `out`/solutions/<problem>.py; return that folder."""
    from kernelsmith.report import write_reports
    from kernelsmith.search.loop import optimize
    from kernelsmith.search.run_config import SearchConfig

    solutions = Path(out) / "solutions"
    solutions.mkdir(parents=True, exist_ok=True)
    for problem in problems:
        name = operator_name(problem)
        folder = Path(out) / name
        yaml_path = write_task_folder(problem, folder / "task", dtype)
        run_dir = folder / "run"
        config = SearchConfig(
            target=str(yaml_path), op=name, checkout=str(yaml_path.parent / "src"), out=str(run_dir),
            budget=budget, minutes=minutes, mutator=mutator, gpus=None, device=device, resume=False,
            seed=seed, islands=None, exploit=0.7, stagnation=None, progress=False, targets=None)
        found = optimize(config)
        write_reports(found)
        result = found.data
        winner = run_dir / "winner" / f"{name}.py"
        if result.get("winner") and winner.is_file():
            shutil.copyfile(winner, solutions / f"{problem.name}.py")
        if progress:
            progress(problem.name, result)
    return solutions


def report(scores: list[TaskScore]) -> dict:
    """Per-task rows and KernelBench's metrics, as plain data."""
    return {
        "tasks": [{"task": s.task, "correct": s.correct, "speedup": s.speedup, "reason": s.reason,
                   **s.detail} for s in scores],
        "metrics": summarize(scores),
    }


def _ms(score: TaskScore, key: str) -> str:
    values = [sh.get(key) for sh in score.detail.get("shapes") or [] if sh.get(key) is not None]
    return "/".join(f"{v:.4f}" for v in values) or "-"


def format_table(scores: list[TaskScore]) -> str:
    """A markdown table of the tasks (times in ms per shape), then KernelBench's metrics."""
    m = summarize(scores)
    lines = ["| task | correct | PyTorch ms | solution ms | speedup | reason |", "|---|---|---|---|---|---|"]
    for s in scores:
        sp = f"{s.speedup:.2f}x" if s.speedup is not None else ("no timing" if s.correct else "-")
        if s.detail.get("noisy"):
            sp += " (noisy)"
        lines.append(f"| {s.task} | {'yes' if s.correct else 'no'} | {_ms(s, 'baseline_ms')} | "
                     f"{_ms(s, 'candidate_ms')} | {sp} | {s.reason or ''} |")
    lines.append("")
    lines.append(f"correctness rate: {m['correct']}/{m['tasks']} = {m['correctness_rate']:.2f}")
    for p, v in m["fast_p"].items():
        lines.append(f"fast_{p}: " + (f"{v:.2f}" if v is not None else "n/a (no timing was done)"))
    ms = m["mean_speedup"]
    lines.append("mean speedup (geomean over correct tasks, slowdowns included): "
                 + (f"{ms:.2f}x" if ms is not None else "n/a (no timing was done)"))
    if not m["timed"]:
        lines.append("No timing was done (no CUDA device): correctness and integrity only.")
    return "\n".join(lines)
