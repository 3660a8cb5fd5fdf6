"""Fixtures of the fault tests: finished demo runs made once per test session by a real process
(each costs a kernelsmith process: 12-16 s on 2 cores), not once per module."""

from __future__ import annotations

import fcntl
import json
import shutil

import pytest
from faultkit import RUN, ks, rows


def _cache_env(factory) -> dict:
    # A session fixture is set up before the autouse per-test cache fixture: the same cache, named here.
    cache = factory.getbasetemp() / "ks-cache"
    cache.mkdir(exist_ok=True)
    return {"KERNELSMITH_CACHE": str(cache)}


@pytest.fixture(scope="session")
def uninterrupted(request, tmp_path_factory):
    """The rows of an uninterrupted run (rewrite, budget 6, seed 0: three generations of two).

    Plain data, so the xdist workers of a session share one run: their temporary folders share a
    parent, where the first worker to take the lock writes the rows the others then read."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if hasattr(request.config, "workerinput") else base
    saved = root / "faults-uninterrupted.json"
    with open(root / "faults-uninterrupted.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if saved.is_file():
            return json.loads(saved.read_text())
        out = tmp_path_factory.mktemp("whole") / "run"
        proc = ks(*RUN, "--budget", "6", "--seed", "0", "--out", str(out), env=_cache_env(tmp_path_factory))
        assert proc.returncode == 0, proc.stderr
        got = rows(out / "archive.sqlite")
        assert [r["generation"] for r in got] == [0, 1, 1, 2, 2, 3, 3]
        saved.write_text(json.dumps(got))
        return got


@pytest.fixture(scope="session")
def _finished(tmp_path_factory):
    # One per worker: its checkout is a worktree of this worker's cache, which the tests' runs use
    # (a cache reads its own worktrees through its store; another cache's would be a foreign folder).
    out = tmp_path_factory.mktemp("finished") / "run"
    proc = ks(*RUN, "--budget", "2", "--seed", "0", "--out", str(out), env=_cache_env(tmp_path_factory))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def finished(_finished, tmp_path):
    """A copy of a finished run (rewrite, budget 2, seed 0) this test may damage."""
    out = tmp_path / "run"
    shutil.copytree(_finished, out)
    return out
