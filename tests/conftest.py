"""Shared test setup: the Triton interpreter without CUDA, private cache folders, GPU skip."""

import os
import socket
import subprocess

import pytest

# One OpenMP thread per torch process, this one and every process a test starts (they inherit it;
# the product sets it for interpreter workers only, sandbox/spawn.device_env). The suite runs three
# test processes on two cores, each with referee workers, runners and oracles;
# with a thread per core in each, OpenMP's threads spin at the end of every parallel op while other
# processes hold the cores: test_memory's eviction test took 17 s and about twice the CPU it takes
# with one (6.5 s). No test depends on torch's thread count. Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

HAS_CUDA = torch.cuda.is_available()

# The bot's tests need PyGithub and PyJWT, which a GPU box may lack: tests/bot/botkit.py
# then skips every module that imports it (reported as skipped; CI's KERNELSMITH_REQUIRE_BOT=1 makes it
# an error), and the other folders collect as usual.

# Without CUDA every kernel runs under the Triton interpreter; it must be set before @triton.jit runs.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", autouse=True)
def ks_session_cache(tmp_path_factory):
    """The kernelsmith cache of this test process (None with KERNELSMITH_KEEP_CACHE=1: the user's).

    Session and module fixtures (a Ray cluster, referees, the fault tests' runs) are made before any
    test's own cache is set: without this they would write the user's ~/.cache/kernelsmith and its
    state file. tests/upstreamkit.py found the release checkouts in the user's cache at import,
    before this.
    """
    base = tmp_path_factory.getbasetemp()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELSMITH_STATE", str(base / "ks-state.json"))
        if os.environ.get("KERNELSMITH_KEEP_CACHE") == "1":
            yield None
            return
        cache = base / "ks-cache"
        cache.mkdir(exist_ok=True)
        mp.setenv("KERNELSMITH_CACHE", str(cache))
        yield cache


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, ks_session_cache, monkeypatch):
    """Each test its own state file; the test process's kernelsmith cache, never the user's.

    The state file is the record of past runs (scan's "never optimized", what a scheduled run skips):
    shared, what a test saw would depend on which tests ran before it in the same process, which
    pytest-xdist's grouping decides. The cache holds checkouts and snapshots keyed by their content,
    made once per process; a test that asserts what is cached (a release checkout's `cached`) takes
    a cache of its own (tests/targets/test_targets_release.py). With KERNELSMITH_KEEP_CACHE=1 the
    cache is the user's.
    """
    monkeypatch.setenv("KERNELSMITH_STATE", str(tmp_path_factory.mktemp("ks-state") / "state.json"))


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_below(monkeypatch):
    """Processes a test starts (verify's upstream pytest) are no xdist workers: with `-n`, the
    inherited PYTEST_XDIST_WORKER made pytest-benchmark in them disable itself and warn."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `gpu` on machines without CUDA."""
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def listener():
    """A TCP server on the host's loopback (what sandboxed code must not reach): its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    yield srv.getsockname()[1]
    srv.close()


@pytest.fixture
def sibling(request):
    """A dumpable process of this user holding the test module's SECRETS (like a CI step's shell)."""
    proc = subprocess.Popen(["sleep", "300"], env={**os.environ, **request.module.SECRETS})
    yield proc
    proc.kill()
    proc.wait()
