"""search/resolve.py: a new run's device is resolved while the harness facts child runs, and a
device that cannot be had is still one clear --device error that leaves no run directory."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import kernelsmith.referee.backend as backend
from kernelsmith.cli import main
from kernelsmith.errors import ConfigError
from kernelsmith.onboard import task as task_module
from kernelsmith.search import resolve

ROOT = Path(__file__).resolve().parents[2]


def _optimize(out, device: str) -> int:
    return main(["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--mutator",
                 "params", "--budget", "1", "--device", device, "--out", str(out), "--no-progress"])


def test_cuda_without_a_cuda_device_is_a_device_error_and_no_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(backend, "cuda_available", lambda: False)
    assert _optimize(tmp_path / "run", "cuda") == 2
    err = capsys.readouterr().err
    assert "--device" in err and "torch sees no CUDA device" in err
    assert not (tmp_path / "run").exists()


def test_the_device_is_asked_for_while_the_task_loads(tmp_path, monkeypatch):
    """torch's import (inside cuda_available) and the harness facts child overlap: with each made
    to take 0.5 s, resolving the run takes about one of them, not both."""
    load = task_module.load_task
    load("demo", "silu_and_mul", targets=str(ROOT / "targets"), harness="facts")  # its facts, cached now
    seen = {}

    def slow_cuda():
        seen["device_thread"] = threading.current_thread() is not threading.main_thread()
        time.sleep(0.5)
        return False

    def slow_load(*a, **k):
        time.sleep(0.5)
        return load(*a, **k)

    monkeypatch.setattr(backend, "cuda_available", slow_cuda)
    monkeypatch.setattr(task_module, "load_task", slow_load)
    config = type("C", (), {"out": str(tmp_path / "run"), "resume": False, "ray": None, "device": "cuda",
                            "target": "demo", "op": "silu_and_mul", "checkout": None,
                            "targets": str(ROOT / "targets")})()
    start = time.monotonic()
    with pytest.raises(ConfigError, match="torch sees no CUDA device"):
        resolve.resolve_run(config)
    assert seen["device_thread"] and time.monotonic() - start < 0.9
    assert not (tmp_path / "run").exists()
