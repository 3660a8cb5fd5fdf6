"""The kernelsmith steps the bot drives (scan, optimize, verify), each in a subprocess holding no token.

`Engine` is the one seam between the bot and the engine: candidate code, upstream tests and a
target's `setup` run only inside these subprocesses, whose environment is scrubbed of GitHub and
Actions credentials. Tests may hand the bot another object with the same three methods (for
example one that copies a saved run directory instead of searching); publishing, state and the
dashboard then run exactly as in production.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from kernelsmith.pycmd import module_argv
from kernelsmith.sandbox.spawn import run

from .gitops import scrubbed


class Engine:
    """Runs `python -m kernelsmith ...` with a scrubbed environment and plain argument lists."""

    def __init__(self, targets_dir: Path, optimize_args: list[str] | None = None, log=None):
        self.targets_dir = Path(targets_dir)
        if optimize_args is None:
            optimize_args = shlex.split(os.environ.get("KERNELSMITH_OPTIMIZE_ARGS", ""))
        self.optimize_args = optimize_args
        self.log = log or (lambda text: print(text, file=sys.stderr))

    def _run(self, args: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        cmd = module_argv("kernelsmith", "--targets", str(self.targets_dir), *args)
        self.log("$ " + shlex.join(cmd[1:]))
        # Output streams to the job log; only scan's JSON is captured.
        return run(cmd, None, env=scrubbed(), timeout=timeout, session=False,
                   stdout=subprocess.PIPE if args[0] == "scan" else None, text=True)

    def scan(self, target: Path) -> dict:
        """`kernelsmith scan TARGET --json` parsed; {} when the scan fails (the error is logged)."""
        # --static: the gate job holds a write token, so scan imports no harness and runs no setup.
        proc = self._run(["scan", str(target), "--json", "--static"], timeout=1800)
        # Exit 2 with JSON means some operator has a problem: the others are still usable.
        try:
            data = json.loads(proc.stdout or "")
        except ValueError:
            self.log(f"scan of {target} failed (exit {proc.returncode}) and printed no JSON")
            return {}
        if proc.returncode != 0:
            self.log(f"scan of {target}: exit {proc.returncode}; operators with problems are skipped")
        return data if isinstance(data, dict) else {}

    def optimize(self, target: Path, op: str, out: Path, budget: int | None, minutes: float | None,
                 replay: Path | None = None) -> int:
        """`kernelsmith optimize`; exit 0 with an accepted winner, 1 without, 2 on config errors.
        With `replay` (a diff file), one proposal: that winner on the current base (a rebase)."""
        args = ["optimize", str(target), op, "--out", str(out)]
        if replay is not None:
            # The search settings (mutator, budget) do not apply to a replay; --device etc. still do.
            args += ["--replay", str(replay), *_without(self.optimize_args, ("--mutator", "--budget"))]
        else:
            args += self.optimize_args
        if budget is not None and replay is None:
            args += ["--budget", str(budget)]
        if minutes is not None:
            args += ["--minutes", f"{minutes:g}"]
        return self._run(args).returncode

    def verify(self, run_dir: Path) -> int:
        """`kernelsmith verify RUN_DIR`; exit 0 pass, 1 regression, 2 could not run."""
        return self._run(["verify", str(run_dir)]).returncode


def _without(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """`args` minus the given flags and their values (`--flag value` or `--flag=value`)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        elif not a.startswith(tuple(f + "=" for f in flags)):
            out.append(a)
    return out
