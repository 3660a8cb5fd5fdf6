"""`kernelsmith report RUN_DIR`: re-render report.md, speedup.png and benchmark.json."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the `report` subcommand."""
    p = subparsers.add_parser("report", help="re-render report.md and speedup.png of a run directory")
    p.add_argument("run_dir", help="a run directory written by `kernelsmith optimize`")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Render the run directory's report files from result.json and the archive."""
    from kernelsmith.report import render_all
    from kernelsmith.rundir import load_run

    rd = load_run(args.run_dir)
    for path in render_all(rd):
        print(path)
    return 0
