"""Fixtures of the fault tests: demo runs made by real processes once per test session (each
costs a kernelsmith process: 7-16 s on 2 cores), not once per module or per test."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from faultkit import BUDGET, RUN, ks, rows

from kernelsmith.faultpoint import ENV


def _once(request, factory, name: str, make: Callable[[Path], dict]) -> dict:
    """What `make(folder)` found (plain data), made once per test session: under xdist the workers'
    temporary folders share a parent, where the first worker to take the lock saves it for the others.
    Only data is shared: a run directory stays with the worker whose cache holds its checkout."""
    base = factory.getbasetemp()
    root = base.parent if hasattr(request.config, "workerinput") else base
    saved = root / f"faults-{name}.json"
    with open(root / f"faults-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if saved.is_file():
            return json.loads(saved.read_text())
        got = make(factory.mktemp(name))
        saved.write_text(json.dumps(got))
        return got


@pytest.fixture(scope="session")
def uninterrupted(request, tmp_path_factory):
    """The rows of an uninterrupted run (rewrite, budget 6, seed 0: three generations of two)."""
    def make(folder: Path) -> dict:
        out = folder / "run"
        proc = ks(*RUN, *BUDGET, "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        got = rows(out / "archive.sqlite")
        assert [r["generation"] for r in got] == [0, 1, 1, 2, 2, 3, 3]
        return {"rows": got}

    return _once(request, tmp_path_factory, "uninterrupted", make)["rows"]


def _kill_report_resume(folder: Path, point: str) -> dict:
    """A run (rewrite, budget 6, seed 0) with a TMPDIR of its own killed with SIGKILL right after the
    write `point` (faultpoint.py); `report` on it; a live process's referee folder added to that
    TMPDIR; `--resume`. What each step did and left."""
    tmp, out = folder / "tmp", folder / "run"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    killed = ks(*RUN, *BUDGET, "--out", str(out), env={**env, ENV: point})
    left = [p for p in tmp.iterdir() if p.name.startswith("kernelsmith-referee-")]
    archive = out / "archive.sqlite"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    report = ks("report", str(out))
    killed_state = {
        "killed_rc": killed.returncode, "killed_stderr": killed.stderr[-2000:],
        "left": [p.name for p in left],
        "left_holds_files": any((p / n).exists() for p in left for n in os.listdir(p)),
        "report_rc": report.returncode, "report_stderr": report.stderr,
        "report_md": (out / "report.md").exists(),
        "archive_kept": hashlib.sha256(archive.read_bytes()).hexdigest() == digest}
    alive = tmp / f"kernelsmith-referee-{os.getpid()}-inuse"  # a live owner's: to be kept
    alive.mkdir()
    resumed = ks(*RUN, *BUDGET, "--out", str(out), "--resume", env=env)
    return {**killed_state, "resumed_rc": resumed.returncode, "resumed_stderr": resumed.stderr[-3000:],
            "left_after_resume": [p.name for p in left if p.exists()], "alive_kept": alive.is_dir(),
            "rows": rows(archive)}


@pytest.fixture(scope="session")
def killed_then_resumed(request, tmp_path_factory):
    """killed_then_resumed(point): what `_kill_report_resume` found for the kill point `point`, made
    once per session: the kill test and the killed run's report test read each point's, the
    referee folders' test add#4's."""
    def get(point: str) -> dict:
        name = "killed-" + point.replace("#", "-").replace(":", "-")
        return _once(request, tmp_path_factory, name,
                     lambda folder: _kill_report_resume(folder, point))

    return get


@pytest.fixture(scope="session")
def _finished(tmp_path_factory):
    # One per worker: its checkout is a worktree of this worker's cache, which the tests' runs use
    # (a cache reads its own worktrees through its store; another cache's would be a foreign folder).
    out = tmp_path_factory.mktemp("finished") / "run"
    proc = ks(*RUN, "--budget", "2", "--seed", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def finished(_finished, tmp_path):
    """A copy of a finished run (rewrite, budget 2, seed 0) this test may damage."""
    out = tmp_path / "run"
    shutil.copytree(_finished, out)
    return out
