"""`kernelsmith sweep TARGET OP`: the exhaustive grid over the params knobs, same referee; a run dir."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .optimize import _gpus, add_pool_options, pool_config


def register(subparsers) -> None:
    """Add the `sweep` subcommand."""
    p = subparsers.add_parser(
        "sweep",
        help="evaluate every launch configuration of the params knobs (the baseline for search claims)",
        description="Exhaustive grid over the knobs the params mutator finds (every combination of "
        "their domains, single configurations), judged by the same referee as `optimize` and written "
        "as a run directory; result.json's `sweep` has the grid size, the best single config and the "
        "per-shape bests. Points are visited in a random order fixed by --seed, so --minutes cuts a "
        "uniform sample. Exits 0 with a winner, 1 without one, 2 on usage or config errors.",
    )
    p.add_argument("target", help="target yaml path or name under the targets folder")
    p.add_argument("op", help="operator name in the target")
    p.add_argument("--checkout", help="use this folder as the target's source (default: cached clone)")
    p.add_argument("--out", help="the run directory (default: runs/<target>-<op>-<time>)")
    p.add_argument("--minutes", type=float, help="wall-clock budget in minutes (default: the whole grid)")
    p.add_argument("--gpus", help="comma-separated CUDA device indices (default: all visible)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "interpret"))
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out from its archive")
    p.add_argument("--seed", type=int, default=0, help="fixes the order the grid is visited in")
    p.add_argument(
        "--compile-limit",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="reject (as a timeout) a point whose kernels take longer than this to compile (default 20; "
        "0: no limit)",
    )
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of a live bar")
    add_pool_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the sweep; 0 with an accepted winner, 1 without."""
    from ..search.loop import SearchConfig
    from .run import optimize  # the search, then its reports

    if args.minutes is not None and args.minutes <= 0:
        raise ConfigError("--minutes", "must be positive")
    config = SearchConfig(
        target=args.target,
        op=args.op,
        checkout=args.checkout,
        out=args.out,
        minutes=args.minutes,
        mutator="grid",
        command="sweep",
        gpus=_gpus(args.gpus),
        device=args.device,
        resume=args.resume,
        seed=args.seed,
        progress=not args.no_progress,
        targets=args.targets,
        compile_limit=args.compile_limit,
        **pool_config(args),
    )
    result = optimize(config)
    sweep = result.get("sweep") or {}
    if result.get("timed") and sweep:
        table = sweep["per_shape_table_beats_single"]
        print(
            f"sweep: {sweep['evaluated']} of {sweep['grid_size']} configurations evaluated"
            f"{'' if sweep['complete'] else ' (cut short)'}; best single config "
            f"{sweep['best_single_geomean']:.3f}x, a config per shape "
            f"{sweep['per_shape_best_geomean'] or 0:.3f}x"
            + (" (a per-shape table beats the best single config)" if table else "")
        )
    return 0 if result.get("winner") else 1
