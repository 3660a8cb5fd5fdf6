"""Every harness under targets/ passes `kernelsmith harness check` on CPU (the interpreter).

The demo target is bundled; LMDeploy and SGLang need their sources (tests/upstreamkit.py: the release
checkouts scripts/test.sh makes, or LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT).
"""

from pathlib import Path

import pytest
import upstreamkit

from kernelsmith.harnesscheck import check_harness
from kernelsmith.target.config import load_target
from kernelsmith.target.task import load_task

TARGETS = Path(__file__).resolve().parents[2] / "targets"
MINISERVE = TARGETS.parent / "examples" / "miniserve"
OPS = [(name, op.name) for name in ("demo", "lmdeploy", "sglang")
       for op in load_target(TARGETS / f"{name}.yaml").operators]


def _checkout(target_name):
    if target_name == "demo":
        return MINISERVE
    return upstreamkit.require(target_name)


@pytest.mark.parametrize("target_name, op_name", OPS)
def test_harness_check_passes_on_cpu(target_name, op_name, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = load_task(str(TARGETS / f"{target_name}.yaml"), op_name, checkout=str(_checkout(target_name)))
    report = check_harness(task, "interpret", timeout_s=300)
    assert report.sound, "\n".join(report.lines())
    assert report.passed >= 20
