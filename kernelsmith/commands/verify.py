"""`kernelsmith verify RUN_DIR`: upstream tests and benchmark on the base and on the winner."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    """Add the `verify` subcommand."""
    from kernelsmith.verify import DEFAULT_TIMEOUT_S

    p = subparsers.add_parser(
        "verify", help="run the operator's upstream tests and benchmark on the base and the winner",
        description="In a clean worktree at the run's base commit, run the operator's upstream test "
                    "command (and benchmark command), apply winner/<file>, run them again. Pass only "
                    "if every test that passed on the base passes with the winner. Writes verify.json "
                    "and the 'Upstream tests' section of report.md. Exit 0 pass, 1 regression, "
                    "2 could not run (missing dependency, no GPU, bad command, nothing passing).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `optimize`")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"limit per command in seconds (default {DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--json", action="store_true", help="print verify.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verify, record the outcome in the state file, print a summary; exit 0 / 1 / 2."""
    from kernelsmith.errors import KernelsmithError
    from kernelsmith.onboard.state import record_run_dir
    from kernelsmith.verify import exit_code, verify_run

    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    doc = verify_run(args.run_dir, timeout_s=args.timeout, log=log)
    try:
        record_run_dir(args.run_dir, verify_status=doc["status"])
    except KernelsmithError as e:  # the verdict stands even where the state cannot be written
        print(f"kernelsmith: warning: state not updated: {e}", file=sys.stderr)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"verify: {doc['status']}: {doc['reason']}")
        for side in ("base", "winner"):
            s = doc.get(side)
            if s and s.get("passed") is not None:
                print(f"  {side}: {s['passed']} passed, {s['failed']} failed, {s['errors']} errors, "
                      f"{s['skipped']} skipped in {s['duration']:.1f} s")
        for t in doc.get("newly_failing", [])[:20]:
            print(f"  lost: {t}")
    return exit_code(doc)
