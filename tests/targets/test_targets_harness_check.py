"""Every harness under targets/ passes `kernelsmith harness check` on CPU (the interpreter).

The demo target is bundled; LMDeploy, SGLang and Liger-Kernel need their sources (tests/upstreamkit.py:
the release checkouts scripts/test.sh makes, or LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT / LIGER_CHECKOUT).
"""

from pathlib import Path

import pytest
import upstreamkit

from kernelsmith.harness.static import harness_variants
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.harness_check import check_harness
from kernelsmith.onboard.task import load_task

TARGETS = Path(__file__).resolve().parents[2] / "targets"
MINISERVE = TARGETS.parent / "examples" / "miniserve"
# The router's kernel costs the interpreter about 75 ms per token (333 tokens: 26 s, measured) and its
# VARY draws up to 5000 tokens (a fresh shape the referee checks: about 6 minutes a call, past the
# check's limit), so it is checked on a GPU (its kernel runs on CPU shapes in test_targets_harnesses.py).
GPU_ONLY = {("lmdeploy", "fused_single_group_router")}
# Every operator, and every harness variant of one (`OP@VARIANT`).
OPS = [pytest.param(name, n, marks=[pytest.mark.gpu] if (name, op.name) in GPU_ONLY else [])
       for name in ("demo", "lmdeploy", "sglang", "liger")
       for op in load_target(TARGETS / f"{name}.yaml").operators
       for n in [op.name, *(f"{op.name}@{v}" for v in harness_variants(op.harness))]]


def _checkout(target_name):
    if target_name == "demo":
        return MINISERVE
    return upstreamkit.require(target_name)


@pytest.mark.parametrize("target_name, op_name", OPS)
def test_harness_check_passes_on_cpu(target_name, op_name, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = load_task(str(TARGETS / f"{target_name}.yaml"), op_name, checkout=str(_checkout(target_name)))
    device = "cuda" if (target_name, op_name.split("@")[0]) in GPU_ONLY else "interpret"
    report = check_harness(task, device, timeout_s=300)
    assert report.sound, "\n".join(report.lines())
    assert report.passed >= 20
