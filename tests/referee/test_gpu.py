"""The referee on a CUDA device: timing, the A/A control, and the hacks that only a GPU exposes."""

import pytest
from referee_helpers import CORPUS, demo_task

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def silu_referee():
    from kernelsmith.referee import Referee

    with Referee(demo_task("silu_and_mul"), device="cuda", seed=99) as ref:
        yield ref


def test_screen_timing_of_an_honest_candidate(silu_referee):
    code = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    v = silu_referee.evaluate(code, candidate_id=1, timing="screen")
    assert v.accepted and v.timed and v.geomean_speedup and v.geomean_speedup > 0
    assert v.timing["metric"] == "device" and v.timing["noisy"] is None  # screen: no A/A
    for s in v.shapes:
        lo, hi = s["ci95"]
        assert s["baseline_ms"] > 0 and s["candidate_ms"] > 0 and lo <= hi
        assert 0 < s["pct_roofline"] <= 150


def test_full_timing_has_an_aa_control_and_host_times(silu_referee):
    v = silu_referee.evaluate(None, candidate_id=2, timing="full")
    assert v.accepted and v.timed
    aa = v.timing["aa_ratio"]
    assert aa is not None and (abs(aa - 1) <= 0.01 or v.timing["noisy"])
    assert all(s["host_ms"] > 0 and s["device_ms"] > 0 for s in v.shapes)
    assert 0.9 < v.geomean_speedup < 1.1  # the base against itself


@pytest.mark.parametrize("name,violation", [
    ("rms_norm__side_stream", "extra_streams"),
    ("rms_norm__timer_patch", "monkeypatch"),
    ("rms_norm__cache_by_pointer", "cached_result"),
    ("rms_norm__stale_memory", "unwritten_output"),
])
def test_gpu_cheats(name, violation):
    from kernelsmith.referee import Referee

    with Referee(demo_task("rms_norm"), device="cuda", seed=5) as ref:
        v = ref.evaluate((CORPUS / "cheats" / f"{name}.py").read_text(), candidate_id=3, timing="screen")
    assert not v.accepted and violation in v.violations, v.feedback()
