"""`kernelsmith bench TASKS_DIR [--solutions DIR | --mutator M]`: KernelBench-format tasks, scored."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from datetime import datetime
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.scratch import scratch_dir
from kernelsmith.search import mutators


def register(subparsers) -> None:
    """Add the `bench` subcommand."""
    p = subparsers.add_parser(
        "bench", help="score KernelBench-format tasks with KernelBench's metrics",
        description="Each *.py in TASKS_DIR is a KernelBench problem (Model, get_inputs, "
                    "get_init_inputs). --solutions DIR scores DIR/<problem>.py (a file defining "
                    "ModelNew on Triton kernels), the way KernelBench scores generations; --mutator "
                    "runs `optimize` on each task and scores its winner. Prints a table with the "
                    "correctness rate, fast_1.0, fast_1.2 and the mean (geometric) speedup.")
    p.add_argument("tasks", metavar="TASKS_DIR", help="folder of KernelBench problem files")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--solutions", metavar="DIR", help="folder of solutions named like the problems")
    how.add_argument("--mutator", choices=mutators.CHOICES,
                     help="run optimize on each task with this mutator")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "interpret"))
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                   help="precision of inputs and weights (KernelBench's default: float32)")
    p.add_argument("--only", help="comma-separated problem names to score (default: all)")
    p.add_argument("--budget", type=int, help="with --mutator: proposals per task")
    p.add_argument("--minutes", type=float, help="with --mutator: minutes per task")
    p.add_argument("--out", help="with --mutator: folder for the runs and winners "
                                 "(default runs/bench-<time>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print per-task results and metrics as JSON")
    p.add_argument("--save", metavar="FILE", help="also write per-task results and metrics as JSON to FILE")
    p.set_defaults(func=run)


def _select(problems, only: str | None):
    if not only:
        return problems
    wanted = [x.strip() for x in only.split(",") if x.strip()]
    known = {p.name: p for p in problems}
    missing = [w for w in wanted if w not in known]
    if missing:
        raise ConfigError("--only", f"unknown problem(s) {', '.join(missing)} (known: {', '.join(known)})")
    return [known[w] for w in wanted]


def run(args: argparse.Namespace) -> int:
    """Score the tasks and print the table (or JSON)."""
    from kernelsmith.kernelbench.bench import format_table, optimize_tasks, report, score_solutions
    from kernelsmith.kernelbench.problem import list_problems

    problems = _select(list_problems(args.tasks), args.only)
    if args.mutator is None and (args.budget is not None or args.minutes is not None):
        raise ConfigError("--budget/--minutes", "only apply with --mutator")
    log = (lambda s: print(f"  {s.task}: {'correct' if s.correct else s.reason}", file=sys.stderr)) \
        if not args.json else None
    if args.mutator:
        out = Path(args.out or f"runs/bench-{datetime.now().strftime('%Y%m%d-%H%M%S')}").resolve()
        # The search's progress goes to stderr, so stdout holds only the table (or the JSON).
        with contextlib.redirect_stdout(sys.stderr):
            solutions = optimize_tasks(problems, out, mutator=args.mutator, device=args.device,
                                       dtype=args.dtype, budget=args.budget, minutes=args.minutes,
                                       seed=args.seed)
        # A task whose search found no accepted winner is scored as KernelBench scores a failed
        # generation: incorrect.
        scores = score_solutions(problems, solutions, out / "score", device=args.device,
                                 dtype=args.dtype, seed=args.seed, progress=log, missing="no_winner")
    else:
        with scratch_dir("ks-bench-") as work:  # candidates' solutions run there
            scores = score_solutions(problems, Path(args.solutions), Path(work), device=args.device,
                                     dtype=args.dtype, seed=args.seed, progress=log)
    data = report(scores)
    data["device"] = args.device
    data["dtype"] = args.dtype
    from kernelsmith.sandbox import summary

    data["sandbox"] = summary()
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(data, indent=2) + "\n")
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_table(scores))
    return 0
