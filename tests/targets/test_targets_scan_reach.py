"""A hotspot mark counts as covered only when an operator's entry reaches the marked function."""

from pathlib import Path

from kernelsmith.onboard.checkout import prepare_checkout
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.scan import reachable_functions, scan_target
from kernelsmith.onboard.state import empty_state

ROOT = Path(__file__).resolve().parents[2]

SOURCE = '''
import triton

@triton.jit
def _kernel(x): pass

@triton.jit
def _other_kernel(x): pass

def _launch(x):
    _kernel[(1,)](x)

def entry(x):
    return _launch(x)

def other(x):
    _other_kernel[(1,)](x)
'''


def test_reachable_follows_calls_and_launches():
    assert reachable_functions(SOURCE, "entry") == {"entry", "_launch", "_kernel"}
    assert reachable_functions(SOURCE, "missing") == set()
    assert reachable_functions("def broken(:\n", "broken") == set()


def test_demo_marks_in_a_covered_file_still_need_a_harness():
    target = load_target(ROOT / "targets" / "demo.yaml")
    result = scan_target(target, prepare_checkout(target, ROOT / "examples" / "miniserve"), empty_state())
    status = {h.function: h.status for h in result.hotspots}
    assert status["_rms_norm_kernel"] == "harness: rms_norm"
    assert status["_silu_and_mul_kernel"] == "harness: silu_and_mul"
    assert status["_fused_add_rms_norm_kernel"] == "needs a harness"
