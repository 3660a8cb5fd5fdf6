"""On a CUDA device: a short params search on the demo RMSNorm finds a faster launch configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelsmith.cli import main
from kernelsmith.search.archive import Archive

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_params_search_on_gpu(tmp_path):
    out = tmp_path / "run"
    rc = main(
        [
            "--targets",
            str(ROOT / "targets"),
            "optimize",
            "demo",
            "rms_norm",
            "--mutator",
            "params",
            "--budget",
            "6",
            "--gpus",
            "0",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    result = json.loads((out / "result.json").read_text())
    assert result["timed"] and rc == (0 if result["winner"] else 1)
    # num_warps alone is worth ~1.5x on the large shapes of this kernel (dev/notes/environment.md).
    assert result["winner"] and result["geomean_speedup"] > 1.05
    assert result["geomean_ci95"][0] > 1.0 and result["no_winner_reason"] is None  # a measured win
    with Archive(out / "archive.sqlite") as a:
        rows = a.all()
    assert rows[0]["timing"] == "full" and all(
        r["timing"] in ("screen", "full") for r in rows[1:] if r["status"] == "evaluated"
    )
    assert all(s["ci95"] and s["pct_roofline"] for s in result["shapes"])
    bench = json.loads((out / "benchmark.json").read_text())
    assert bench["benchmarks"] and bench["benchmarks"][0]["extra_info"]["stats_from"] == "referee samples"


@pytest.mark.gpu
def test_the_ray_actors_compile_gate_with_real_compile_processes(tmp_path, monkeypatch):
    """What each Ray actor runs (ray_pool.CompileGate), without a cluster: the real compile processes
    on this machine and the real referee. A candidate whose compile job runs past the limit (its
    launcher stalls for a minute; the limit is floored at 4 base jobs) gets the timeout verdict
    without reaching the GPU; an ordinary one is compiled there and judged by the referee."""
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee
    from kernelsmith.search.ray_pool import CompileGate

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    gate = CompileGate.build(task, "cuda", 0, 1.0, True, n_gpus=1)
    assert gate.precompiler is not None, "no compile processes (under 4 cores, or KERNELSMITH_PRECOMPILE=0)"
    stall = task.base_code.replace("    BLOCK = 64\n", "    __import__('time').sleep(90)\n    BLOCK = 64\n")
    assert stall != task.base_code
    try:
        with Referee(task, device="cuda", gpu=0, seed=0) as referee:
            slow = gate.evaluate(referee, stall, {"candidate_id": 1, "timing": "none"})
            quick = gate.evaluate(referee, task.base_code.replace("BLOCK = 64", "BLOCK = 128"),
                                  {"candidate_id": 2, "timing": "none"})
    finally:
        gate.close()
    assert not slow.accepted and slow.reason == "timeout" and "--compile-limit" in slow.error
    assert slow.details["compile_limit_s"] == 1.0 and slow.details["compile_s"] < 90
    assert quick.accepted, quick.feedback()
