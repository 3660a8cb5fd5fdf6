"""Device memory measured, not assumed (memory.py), on a real GPU: this test process holds most of
the device (a ballast tensor), so the referee's workers measure little free memory. The demo
silu_and_mul's shapes (up to 8192 x 28672 fp16 inputs) then do not fit with all their copies and
cached data: the base is still judged and timed, and the verdict says what was done; with less left,
a shape that does not fit alone is named with its need and the memory free."""

import pytest
from referee_helpers import ROOT, demo_task

from kernelsmith.harness.model import load_harness
from kernelsmith.referee import Referee
from kernelsmith.referee.checks.diagnose import NOT_A_CANDIDATE, base_failure

pytestmark = pytest.mark.gpu

GIB = 1 << 30
# Free device memory left to the referee. Its processes' contexts and flush buffers take about 3
# GiB; the demo's shapes, cached with their regions and timed with all copies, about 20 GiB more;
# the largest alone about 14 GiB with one copy of its three input sets, about 2 GiB with one set
# (5 GiB left was enough for it; with 3.5 GiB a child crashed before any shape was judged).
TIGHT_LEFT = 20 * GIB
TOO_LITTLE_LEFT = 4 * GIB + GIB // 4


def _ballast(left: int):
    """A tensor holding all the device's free memory but `left` bytes (this process keeps it)."""
    import torch

    torch.cuda.init()
    free, _ = torch.cuda.mem_get_info()
    if free < left + GIB:
        pytest.skip(f"the device has {free / GIB:.1f} GiB free, too little for this test")
    return torch.empty(free - left, dtype=torch.uint8, device="cuda")


def test_a_shape_set_that_exceeds_free_memory_is_judged_and_timed():
    held = _ballast(TIGHT_LEFT)
    try:
        with Referee(demo_task("silu_and_mul"), device="cuda", seed=11) as ref:
            v = ref.evaluate(None, candidate_id=0, timing="screen")
    finally:
        del held
    memory = v.details.get("memory") or {}
    assert v.accepted and v.timed, (v.violations, v.details.get("messages"), memory)
    decisions = memory["decisions"] + memory["boot_decisions"]
    # Idle regions closed, fewer copies, evictions or regenerated data: something had to give.
    assert decisions, memory
    assert {d["action"] for d in decisions} <= {"dropped_regions", "fewer_copies", "fewer_sets", "evicted",
                                                 "regenerate", "skipped_at_boot"}
    allocator = memory["judge_allocator"]
    assert 0 < allocator["allocated"] <= allocator["reserved"], allocator
    assert 0 <= memory["least_free_bytes"] < TIGHT_LEFT


def test_a_shape_that_alone_exceeds_free_memory_is_named():
    held = _ballast(TOO_LITTLE_LEFT)
    try:
        with Referee(demo_task("silu_and_mul"), device="cuda", seed=11) as ref:
            v = ref.evaluate(None, candidate_id=0, timing="screen")
    finally:
        del held
    short = v.details.get("memory_short")
    assert v.violations == ["out_of_memory"] and short, (v.violations, v.details.get("messages"))
    assert short["shape"] in load_harness(ROOT / "targets" / "demo" / "silu_and_mul.py").shapes
    assert short["need_bytes"] is None or short["need_bytes"] > short["free_bytes"]
    text = base_failure(v)
    assert "shape: tokens=" in text and "of device memory;" in text and NOT_A_CANDIDATE not in text
