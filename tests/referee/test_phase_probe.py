"""dev/probes/phase_probe.py: one JSON line per evaluation, and with --profile the judge's and its
runner's functions (under the Triton interpreter here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from referee_helpers import ROOT

PROBES = ROOT / "dev" / "probes"


def _probe(*extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(PROBES / "phase_probe.py"), "demo", "silu_and_mul",
                           "--targets", str(ROOT / "targets"), "--device", "interpret", *extra],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_profile_prints_each_evaluation_then_the_judges_and_the_runners_functions():
    out = _probe("--candidates", "1", "--warmup", "1", "--top", "5", "--profile")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert "boot_phases" in lines[0] and [x["profiled"] for x in lines[1:]] == [False, True]
    assert all(x["phase_s"]["correctness"] > 0 for x in lines[1:])
    for who in ("judge", "runner"):
        for key in ("tottime", "cumulative"):
            assert f"## {who}, by {key} (1 evaluations)" in out.stdout
    runner = out.stdout.split("## runner, by cumulative")[1]
    assert "runner.py" in runner  # the runner's own functions: the child wrote its profile


def test_the_boot_phases_account_for_the_whole_boot_zygote_imports_included():
    out = _probe("--candidates", "1")
    assert out.returncode == 0, out.stderr
    boot = json.loads(out.stdout.splitlines()[0])
    phases = boot["boot_phases"]
    # The parent's side first (the fork server's start and each of its imports, the fork, the wait
    # for the init answer beyond the worker's own phases), then the worker's own phases.
    assert list(phases)[:2] == ["zygote_start", "import numpy"]
    parent = {"import torch", "import triton", "fork", "init_answer"}
    assert parent | {"device_init", "input_cache"} <= set(phases)
    assert phases["import torch"] > 0.1  # a real import, timed in the zygote
    # The monitor's dispatch mode opts out of Dynamo, whose import took 5 s on the H200.
    assert "import torch._dynamo" not in phases
    assert 0.9 * boot["boot_s"] - 0.05 <= sum(phases.values()) <= boot["boot_s"] + 0.01


def test_the_monitors_dispatch_mode_does_not_import_dynamo():
    code = ("import sys, torch\n"
            "from kernelsmith.referee.checks.integrity import Monitor, _OpRecorder\n"
            "with _OpRecorder(Monitor('cpu', []), None):\n"
            "    torch.ones(3).add_(1).sum()\n"
            "print('torch._dynamo' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_steps_prints_the_seconds_of_each_correctness_step_per_evaluation():
    out = _probe("--candidates", "1", "--warmup", "1", "--steps")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    steps = lines[-1]["steps_s"]
    # Each listed shape's trials ran (and within them the runner calls and the comparisons), and
    # the cache's fingerprints were checked after the evaluation.
    assert steps["ShapeTrials.check_shape"] > 0 and steps["RunnerLink.call"] > 0
    assert steps["InputCache.verify"] > 0 and "compare" in steps
    assert steps["ShapeTrials.check_shape"] <= lines[-1]["wall_s"]
    assert "## judge" not in out.stdout  # no profile tables
