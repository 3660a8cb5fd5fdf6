"""Helpers for the fault tests: real `kernelsmith` processes on the demo target under the Triton
interpreter, archives read back read-only, process groups killed whole."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# batch 2 on the interpreter (the rewrite mutator learns no launch space: resolve.py's layout), so
# every generation has two rows and a kill can fall between them.
RUN = ["optimize", "demo", "rms_norm", "--device", "interpret", "--no-progress", "--mutator", "rewrite"]
# Three generations of two rows: the kill points below fall inside the first two.
BUDGET = ["--budget", "6", "--seed", "0"]
# A generation's writes are its rows (archive `add`) and then its `made` mark. add#1 is the base;
# add#2/#3 generation 1's rows, add#4/#5 generation 2's: a kill right after add#2 or add#4 falls
# between the generation's two rows, after add#3 or add#5 between its last row and its mark, after
# meta:made#1 between generation 1's mark and its commit.
KILL_POINTS = ["add#2", "add#3", "meta:made#1", "add#4", "add#5"]
ROW_KEYS = ("id", "code", "parent_id", "generation", "mutator", "island", "status")


def command(*args: str) -> list[str]:
    """`python -m kernelsmith --targets <repo targets> ARGS...`."""
    return [sys.executable, "-m", "kernelsmith", "--targets", str(ROOT / "targets"), *args]


def ks(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run kernelsmith to its end in its own process group, then kill what it left running (a
    killed run's referee workers; they would hold pipes open, hence files for the output)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command(*args), stdout=out, stderr=err, text=True,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            kill_group(proc.pid)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of a process group (referee workers of a killed run)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def rows(archive: Path) -> list[dict]:
    """Every candidate row of an archive, read without changing it, as ROW_KEYS dicts."""
    db = sqlite3.connect(f"file:{archive}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return [{k: r[k] for k in ROW_KEYS} for r in db.execute("SELECT * FROM candidates ORDER BY id")]
    finally:
        db.close()


def meta(archive: Path, key: str) -> str | None:
    """One raw meta value of an archive (read-only)."""
    db = sqlite3.connect(f"file:{archive}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None
    finally:
        db.close()


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single `kernelsmith: error:` line of stderr (asserting there is no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("kernelsmith: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def comparable(rs: list[dict]) -> list[tuple]:
    """What must match between two runs of one seed, row by row (timestamps and verdict texts aside)."""
    return [(r["id"], r["code"], r["parent_id"], r["generation"], r["mutator"], r["island"], r["status"])
            for r in rs]
