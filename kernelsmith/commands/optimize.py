"""`kernelsmith optimize TARGET OP`: the evolutionary search; writes a run directory."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..search import mutators


def register(subparsers) -> None:
    """Add the `optimize` subcommand."""
    p = subparsers.add_parser(
        "optimize",
        help="evolve faster candidates of one operator and write a run directory",
        description="Evolutionary search over candidate kernels of one operator. Exits 0 with an "
        "accepted winner, 1 without one, 2 on usage or config errors.",
    )
    p.add_argument("target", help="target yaml path or name under the targets folder")
    p.add_argument("op", help="operator name in the target")
    p.add_argument("--checkout", help="use this folder as the target's source (default: cached clone)")
    p.add_argument("--out", help="the run directory (default: runs/<target>-<op>-<time>)")
    p.add_argument("--budget", type=int, help="number of proposals (default 40 without --minutes)")
    p.add_argument("--minutes", type=float, help="wall-clock budget in minutes")
    p.add_argument(
        "--mutator",
        default=None,
        choices=mutators.CHOICES,
        help=mutators.CHOICES_HELP,
    )
    p.add_argument(
        "--replay",
        metavar="RUN_DIR_OR_DIFF",
        help="propose exactly one candidate: that run's winner/winner.diff (or this diff file) applied "
        "to the current base; exit 1 when it no longer applies or loses",
    )
    p.add_argument("--gpus", help="comma-separated CUDA device indices (default: all visible)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "interpret"))
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its archive")
    p.add_argument("--seed", type=int, default=0, help="run seed: fixes the sequence of proposals")
    p.add_argument("--islands", type=int, help="number of islands (default: from the budget)")
    p.add_argument(
        "--exploit",
        type=float,
        default=None,
        help="share of parents drawn from the elites rather than the diversity grid (default 0.7; "
        "a resumed run keeps its own)",
    )
    p.add_argument(
        "--stagnation",
        type=int,
        default=None,
        help="stop after this many proposals without a better candidate (default 3/4 of "
        "the budget, at least 12)",
    )
    p.add_argument(
        "--compile-limit",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="reject (as a timeout) a candidate whose kernels take longer than this to compile on the "
        "CPU compile processes (default 20; 0: no limit)",
    )
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of a live bar")
    add_pool_options(p)
    p.set_defaults(func=run)


def add_pool_options(p) -> None:
    """--ray, --workers-per-node and --pipeline (optimize and sweep): how candidates are evaluated."""
    p.add_argument("--ray", metavar="ADDRESS", help="run the evaluator pool on the Ray cluster at ADDRESS "
                   "(host:port, or auto: the one started on this machine); needs kernelsmith[ray]")
    p.add_argument("--workers-per-node", type=int, metavar="N",
                   help="with --ray: N workers on each node (default: one per GPU; CPU nodes need it)")
    p.add_argument("--pipeline", type=int, metavar="N",
                   help="generations in flight (default: 2, or on CUDA enough to keep one compile process "
                   "per spare CPU core busy); a generation does not see the verdicts of the N-1 before it")


def pool_config(args: argparse.Namespace) -> dict:
    """SearchConfig's ray and pipeline fields, checked; exits 2 naming the install when ray is missing."""
    if args.pipeline is not None and not 1 <= args.pipeline <= 16:
        raise ConfigError("--pipeline", "must be between 1 and 16")
    if args.workers_per_node is not None:
        if args.ray is None:
            raise ConfigError("--workers-per-node", "only applies with --ray")
        if args.workers_per_node < 1:
            raise ConfigError("--workers-per-node", "must be at least 1")
    if args.ray is not None:
        if args.gpus is not None:
            raise ConfigError("--gpus", "with --ray the workers are the cluster's GPUs; leave --gpus out")
        from ..search.ray_pool import require_ray

        require_ray()
    return {"ray": args.ray, "workers_per_node": args.workers_per_node, "pipeline": args.pipeline}


def _gpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError("--gpus", f"{text!r} is not a comma-separated list of device indices") from None
    if not gpus or any(g < 0 for g in gpus):
        raise ConfigError("--gpus", f"{text!r} names no device")
    return gpus


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the search; 0 with an accepted winner, 1 without."""
    from ..search.loop import SearchConfig
    from .run import optimize  # the search, then its reports

    if args.budget is not None and args.budget < 1:
        raise ConfigError("--budget", "must be at least 1")
    if args.minutes is not None and args.minutes <= 0:
        raise ConfigError("--minutes", "must be positive")
    if args.exploit is not None and not 0.0 <= args.exploit <= 1.0:
        raise ConfigError("--exploit", "must be between 0 and 1")
    if args.replay is not None:
        if args.mutator is not None:
            raise ConfigError("--mutator", "--replay is its own mutator; leave --mutator out")
        if args.budget not in (None, 1):
            raise ConfigError("--budget", "--replay makes exactly one proposal")
        if args.resume:
            raise ConfigError("--replay", "a resumed run replays what its run.json holds; drop --replay")
    config = SearchConfig(
        target=args.target,
        op=args.op,
        checkout=args.checkout,
        out=args.out,
        budget=args.budget,
        minutes=args.minutes,
        mutator=args.mutator or mutators.DEFAULT,
        gpus=_gpus(args.gpus),
        device=args.device,
        resume=args.resume,
        seed=args.seed,
        islands=args.islands,
        exploit=args.exploit,
        stagnation=args.stagnation,
        progress=not args.no_progress,
        targets=args.targets,
        replay=args.replay,
        compile_limit=args.compile_limit,
        **pool_config(args),
    )
    result = optimize(config)  # the LLM key is with the broker already (cli.py)
    return 0 if result.get("winner") else 1
