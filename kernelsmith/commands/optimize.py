"""`kernelsmith optimize TARGET OP`: the evolutionary search; writes a run directory."""

from __future__ import annotations

import argparse

from kernelsmith.commands.run_options import add_run_options, run_config
from kernelsmith.errors import ConfigError
from kernelsmith.search import mutators


def register(subparsers) -> None:
    """Add the `optimize` subcommand."""
    p = subparsers.add_parser(
        "optimize",
        help="evolve faster candidates of one operator and write a run directory",
        description="Evolutionary search over candidate kernels of one operator. Exits 0 with an "
        "accepted winner, 1 without one, 2 on usage or config errors.",
    )
    add_run_options(p, "optimize")
    g = p.add_argument_group("search options")
    g.add_argument("--budget", type=int, help="number of proposals (default 40 without --minutes)")
    g.add_argument(
        "--mutator",
        default=None,
        choices=mutators.CHOICES,
        help=mutators.CHOICES_HELP,
    )
    g.add_argument(
        "--replay",
        metavar="RUN_DIR_OR_DIFF",
        help="propose exactly one candidate: that run's winner/winner.diff (or this diff file) applied "
        "to the current base; exit 1 when it no longer applies or loses",
    )
    g.add_argument("--islands", type=int, help="number of islands (default: from the budget)")
    g.add_argument(
        "--exploit",
        type=float,
        default=None,
        help="share of parents drawn from the elites rather than the diversity grid (default 0.7; "
        "a resumed run keeps its own)",
    )
    g.add_argument(
        "--stagnation",
        type=int,
        default=None,
        help="stop after this many measurements that could have changed the best (full measurements, "
        "contender screens) without a better one (default: a tenth of the space's distinct launches, at "
        "least 12; none with --minutes, which are spent, or on a space of at most 64 launches)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the search; 0 with an accepted winner, 1 without."""
    from kernelsmith.commands.run import optimize  # the search, then its reports
    from kernelsmith.search.run_config import SearchConfig

    if args.budget is not None and args.budget < 1:
        raise ConfigError("--budget", "must be at least 1")
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
        budget=args.budget,
        # None on a resume without --mutator: the run's own (a different one is refused: resolve.py)
        mutator=args.mutator if args.resume else args.mutator or mutators.DEFAULT,
        islands=args.islands,
        exploit=args.exploit,
        stagnation=args.stagnation,
        replay=args.replay,
        **run_config(args),
    )
    result = optimize(config)  # the LLM key is with the broker already (cli.py)
    return 0 if result.get("winner") else 1
