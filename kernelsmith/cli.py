"""`kernelsmith` command line: one subcommand per module in kernelsmith/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import KernelsmithError

# Each module defines `register(subparsers)`, which adds its parser and sets `func(args) -> int`.
COMMANDS = ["scan", "evaluate", "optimize", "sweep", "verify", "report", "export", "bench", "harness"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="kernelsmith", description=__doc__)
    parser.add_argument("--targets", help="folder of target yamls (default $KERNELSMITH_TARGETS or targets/)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"kernelsmith.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; usage and config errors exit 2 with one clear line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KernelsmithError as e:
        print(f"kernelsmith: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelsmith: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
