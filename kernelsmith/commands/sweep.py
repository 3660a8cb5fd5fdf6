"""`kernelsmith sweep TARGET OP`: the exhaustive grid over the params knobs, same referee; a run dir."""

from __future__ import annotations

import argparse

from kernelsmith.commands.run_options import add_run_options, run_config


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
    add_run_options(p, "sweep")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the sweep; 0 with an accepted winner, 1 without."""
    from kernelsmith.commands.run import optimize  # the search, then its reports
    from kernelsmith.search.run_config import SearchConfig

    config = SearchConfig(mutator="grid", command="sweep", **run_config(args))
    result = optimize(config)
    sweep = result.get("sweep") or {}
    if result.get("timed") and sweep:
        table = sweep["per_shape_table_beats_single"]
        distinct = sweep.get("distinct_launches") or sweep["grid_size"]
        print(
            f"sweep: {sweep['evaluated']} of {sweep['grid_size']} configurations evaluated"
            + (f" ({distinct} distinct launches)" if distinct < sweep["grid_size"] else "")
            + f"{'' if sweep['complete'] else ' (cut short)'}; best single config "
            f"{sweep['best_single_geomean']:.3f}x, a config per shape "
            f"{sweep['per_shape_best_geomean'] or 0:.3f}x"
            + (" (a per-shape table beats the best single config)" if table else "")
        )
    return 0 if result.get("winner") else 1
