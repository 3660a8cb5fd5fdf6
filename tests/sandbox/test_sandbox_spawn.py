"""The environment a referee's workers start with: under the interpreter, one OpenMP thread per torch
process (several run at once: judge, runner, oracle, a spare), unless the user set a number."""

import os
import subprocess
import sys

from kernelsmith.referee.proc.warm import worker_env
from kernelsmith.sandbox.spawn import start


def test_interpreter_workers_get_one_openmp_thread_unless_the_user_set_a_number(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert worker_env("interpret", None)["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in worker_env("cuda", 0)  # a GPU runner's cores are its own
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_env("interpret", None)["OMP_NUM_THREADS"] == "3"


def test_a_sandboxed_interpreter_child_runs_torch_on_one_thread(monkeypatch, tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    (tmp_path / "tmp").mkdir()
    child = start([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], "candidate",
                  env=worker_env("interpret", None), cwd=tmp_path, writable=[tmp_path],
                  scratch=tmp_path / "tmp", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-2000:]
    assert out.split() == ["1"], (out, err[-2000:], os.cpu_count())
