"""`kernelsmith export RUN_DIR... --format sft|rl -o FILE`: training data from run archives."""

from __future__ import annotations

import argparse

from kernelsmith.errors import ConfigError


def register(subparsers) -> None:
    """Add the `export` subcommand."""
    from kernelsmith.export.dedup import DEFAULT_SIMILARITY
    from kernelsmith.export.steps import DEFAULT_MIN_GAIN

    p = subparsers.add_parser(
        "export", help="training data (SFT chat samples or RL prompts) from run archives",
        description="Turn evolution archives into training data. SFT: one chat sample per kept step "
                    "(system and user prompt exactly as the llm mutator builds them for the parent, "
                    "assistant = the edit that produced the child). Kept: the first step from the "
                    "base when correct; later steps only when correct and faster than the parent "
                    "(runs without timing keep only first steps). RL: prompts with the parent, the "
                    "task and the reward definition, the best steps of each trajectory. Writes FILE "
                    "and FILE.summary.json.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (from `optimize`)")
    p.add_argument("--format", required=True, choices=("sft", "rl"), help="record format")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="output JSON-lines file")
    p.add_argument("--min-gain", type=float, default=DEFAULT_MIN_GAIN,
                   help=f"speedup over the parent a later step needs to count as faster "
                        f"(default {DEFAULT_MIN_GAIN})")
    p.add_argument("--similarity", type=float, default=DEFAULT_SIMILARITY,
                   help="edits of one parent at least this similar are near-duplicates "
                        f"(default {DEFAULT_SIMILARITY})")
    p.add_argument("--rl-top", type=int, default=1,
                   help="RL: best steps kept per trajectory (lineage path), default 1")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export and print the summary."""
    import json

    from kernelsmith.export import export_runs, format_summary

    if args.min_gain <= 0:
        raise ConfigError("--min-gain", "must be positive")
    if not 0 < args.similarity <= 1:
        raise ConfigError("--similarity", "must be in (0, 1]")
    if args.rl_top < 1:
        raise ConfigError("--rl-top", "must be at least 1")
    summary = export_runs(args.runs, args.format, args.output, min_gain=args.min_gain,
                          similarity=args.similarity, rl_top=args.rl_top)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
