"""Shared test setup: the Triton interpreter without CUDA, a private cache folder, GPU skip."""

import os
import socket
import subprocess

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# The bot's tests need PyGithub, PyJWT and GitPython, which a GPU box may lack: tests/bot/botkit.py
# then skips every module that imports it (reported as skipped), and the other folders collect as usual.

# Without CUDA every kernel runs under the Triton interpreter; it must be set before @triton.jit runs.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Tests share one private kernelsmith cache, never the user's (checkouts, state, device data)."""
    if os.environ.get("KERNELSMITH_KEEP_CACHE") != "1":
        cache = tmp_path_factory.getbasetemp() / "ks-cache"
        cache.mkdir(exist_ok=True)
        monkeypatch.setenv("KERNELSMITH_CACHE", str(cache))


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
