"""The interpreter backend's stand-ins: an active driver, a named GPU's device properties, fp8 casts
rounded as the GPU rounds, list grids and `tl` aliases (issue 14, item 4).

The stand-ins patch process globals (Triton's driver, torch.cuda): they are exercised in a child
process, as the referee's workers use them, never in the pytest process itself.
"""

from pathlib import Path

import pytest
from referee_helpers import run_json_child
from tiny_project import tiny_task

CHILD = r'''
import json, os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from kernelsmith.referee.backend.interpret import InterpretBackend
from kernelsmith.interpreter import standins
backend = InterpretBackend()
backend.init_context()
out = {}
target = triton.runtime.driver.active.get_current_target()
out["target"] = [target.backend, target.arch, target.warp_size]
out["driver_props"] = triton.runtime.driver.active.utils.get_device_properties(0)["multiprocessor_count"]
p = torch.cuda.get_device_properties(torch.cuda.current_device())
out["torch_props"] = [p.name, p.major, p.minor, p.multi_processor_count, torch.cuda.get_device_capability()]

@triton.jit
def cast(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m).to(tl.float8e4nv), mask=m)

x = torch.tensor([31.5, 1.0625, -17.3, 500.0, 3.0e-3, 0.3, 15.75, 448.0])
y = torch.empty(8, dtype=torch.float8_e4m3fn)
cast[(1,)](x, y, 8, BLOCK=8)
out["fp8"] = y.float().tolist()
out["fp8_torch"] = x.clamp(-448, 448).to(torch.float8_e4m3fn).float().tolist()

fast_exp = tl.math.exp

@triton.jit
def alias(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, fast_exp(tl.load(x_ptr + offs)))

z = torch.empty(4)
alias[[1]](torch.zeros(4), z, BLOCK=4)
out["alias_list_grid"] = z.tolist()


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


w = torch.randn(100)
v = torch.empty(100)
tuned[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](w, v, 100)
out["autotune"] = bool(torch.equal(v, w * 2))
out["info"] = backend.info()
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def child():
    return run_json_child(CHILD)


def test_active_driver_answers_as_a_cuda_h200(child):
    assert child["target"] == ["cuda", 90, 32]
    assert child["driver_props"] == 132


def test_torch_device_properties_name_the_gpu(child):
    assert child["torch_props"] == ["NVIDIA H200", 9, 0, 132, [9, 0]]


def test_fp8_cast_rounds_to_nearest_even_with_the_carry(child):
    # The triton 3.9 interpreter's own cast gives 16.0 for 31.5 (the mantissa carry is dropped).
    assert child["fp8"][0] == 32.0 and child["fp8"][1] == 1.0  # 1.0625 is a tie: to even
    assert child["fp8"] == child["fp8_torch"]
    assert child["fp8"][3] == 448.0  # saturates as cvt.rn.satfinite does


def test_list_grid_and_module_level_tl_alias(child):
    assert child["alias_list_grid"] == [1.0] * 4


def test_autotune_with_several_configs_runs_without_a_gpu_benchmarker(child):
    assert child["autotune"]


def test_device_names_the_stand_ins_used(child):
    info = child["info"]
    assert set(info["stand_ins"]) == {"active driver", "autotune: first config", "device properties",
                                      "fp8 cast", "list grids", "tl aliases"}
    assert "stand-ins: active driver" in info["name"] and info["stand_in_gpu"] == "NVIDIA H200"


FP8_HARNESS = '''
import torch

SHAPES = [{"n": 4096}]
CPU_SHAPES = [{"n": 100}]
OUTPUTS = None
VARY = {"n": [7, 64, 200]}


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return {"x": 2 * torch.randn(shape["n"], generator=g, device=device)}


def reference(x):
    return torch.exp(x.double()).clamp(max=448.0)
'''


def test_a_real_style_kernel_module_evaluates_under_the_interpreter(tmp_path, monkeypatch):
    from kernelsmith.referee import Referee

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path, "exp_to_fp8", "exp_to_fp8", FP8_HARNESS, kern="standin_kern.py")
    with Referee(task, device="interpret", seed=3, timeout_s=120, prefork=False) as ref:
        verdict = ref.evaluate(None)
    assert verdict.accepted, verdict.feedback()
    used = "stand-ins: active driver, device properties, fp8 cast, list grids, tl aliases"
    assert used in verdict.device["name"]


def test_stand_ins_record_only_their_declared_names_and_every_name_is_recorded_somewhere():
    """The judge believes exactly the `StandIn` names (standins.NAMES) from an oracle's report: every
    record goes through `used(StandIn.X)` (no name written by hand), and no member is dead."""
    import ast

    from kernelsmith.interpreter import standins
    from kernelsmith.referee.backend import interpret

    writes, members = [], set()
    for path in [*Path(standins.__file__).parent.glob("*.py"), *Path(interpret.__file__).parent.glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)) \
                    and getattr(node.value, "id", getattr(node.value, "attr", None)) == "StandIn":
                members.add(node.attr)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("add", "update") \
                    and getattr(node.func.value, "id", getattr(node.func.value, "attr", None)) == "USED":
                writes.append((path.name, node.lineno))
    assert [name for name, _ in writes] == ["standins.py"], writes  # its used(), nowhere else
    assert members == {m.name for m in standins.StandIn}
    assert standins.NAMES == {m.value for m in standins.StandIn}
