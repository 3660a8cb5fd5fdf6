"""Fixtures of the fault tests: finished demo runs made once per module by a real process."""

from __future__ import annotations

import shutil

import pytest
from faultkit import RUN, ks, rows


def _cache_env(factory) -> dict:
    # A module fixture is set up before the autouse per-test cache fixture: the same cache, named here.
    cache = factory.getbasetemp() / "ks-cache"
    cache.mkdir(exist_ok=True)
    return {"KERNELSMITH_CACHE": str(cache)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The rows of an uninterrupted run (rewrite, budget 6, seed 0: three generations of two)."""
    out = tmp_path_factory.mktemp("whole") / "run"
    proc = ks(*RUN, "--budget", "6", "--seed", "0", "--out", str(out), env=_cache_env(tmp_path_factory))
    assert proc.returncode == 0, proc.stderr
    got = rows(out / "archive.sqlite")
    assert [r["generation"] for r in got] == [0, 1, 1, 2, 2, 3, 3]
    return got


@pytest.fixture(scope="module")
def _finished(tmp_path_factory):
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
