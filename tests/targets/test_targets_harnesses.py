"""The LMDeploy and SGLang targets: yaml, harnesses on CPU shapes, loading real kernel files.

Tests that need the upstream sources use tests/upstreamkit.py: LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT,
else the release checkouts scripts/test.sh makes (`kernelsmith checkout NAME --from-package`).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import upstreamkit

from kernelsmith.harness.model import load_harness
from kernelsmith.harness.static import harness_variants
from kernelsmith.lightimport import reexports
from kernelsmith.loader import load_operator_module, package_name_for
from kernelsmith.onboard.config import load_target
from kernelsmith.referee.backend.interpret import accept_list_grids

TARGETS = Path(__file__).resolve().parents[2] / "targets"
YAMLS = {"lmdeploy": TARGETS / "lmdeploy.yaml", "sglang": TARGETS / "sglang.yaml"}
# Kernel files that query the driver at import time: loadable in this process on a CUDA machine only
# (the referee's interpreter workers give them stand-ins: test_targets_harness_check.py runs them).
CUDA_ONLY = {("lmdeploy", "rms_norm"), ("lmdeploy", "silu_and_mul")}
# fp8 outputs: right under the interpreter only with the referee's fp8 cast stand-in (likewise).
CUDA_ONLY |= {("sglang", "act_quant")}
# Every operator, and every harness variant of one (`OP@VARIANT`).
OPS = [(name, n) for name, path in YAMLS.items() for op in load_target(path).operators
       for n in [op.name, *(f"{op.name}@{v}" for v in harness_variants(op.harness))]]


def _op(target_name, op_name):
    target = load_target(YAMLS[target_name])
    return target, target.operator(op_name)


def test_targets_have_three_or_more_checked_operators():
    for name, path in YAMLS.items():
        target = load_target(path)
        assert target.checked and len(target.operators) >= 3, name
        assert all(op.harness.is_file() for op in target.operators)
    assert load_target(YAMLS["sglang"]).stubs["sglang.srt.utils"].is_file()


@pytest.mark.parametrize("target_name, op_name", OPS)
def test_harness_inputs_and_reference_on_cpu_shapes(target_name, op_name):
    _, op = _op(target_name, op_name)
    h = load_harness(op.harness, op.variant)
    assert h.shapes and h.cpu_shapes
    for key in h.vary:
        assert all(key in s for s in h.shapes + h.cpu_shapes), key
    for shape in h.cpu_shapes:
        assert shape["dtype"] in ("float16", "float32")  # the interpreter's bf16 math is wrong
        a, b = h.make_inputs(shape, "cpu", 1), h.make_inputs(shape, "cpu", 1)
        c = h.make_inputs(shape, "cpu", 2)
        tensors = [k for k, v in a.items() if isinstance(v, torch.Tensor) and k not in (h.outputs or [])]
        assert tensors and all(torch.equal(a[k], b[k]) for k in tensors)  # seeded
        assert any(not torch.equal(a[k], c[k]) for k in tensors)  # and the seed matters
        for name in h.outputs or []:
            assert name in a and isinstance(a[name], torch.Tensor)
        before = {k: a[k].clone() for k in tensors}
        expected = h.reference(**a)
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert all(torch.equal(before[k], a[k]) for k in tensors)  # the reference leaves inputs alone
        for i, e in enumerate(expected):
            assert isinstance(e, torch.Tensor) and torch.isfinite(e.float()).all(), (op_name, i)
            if h.outputs:
                out = a[h.outputs[i]]
                assert e.shape == out.shape and e.dtype == out.dtype
        if h.bytes_moved:
            assert h.bytes_moved(shape) > 0


def test_router_inputs_have_unambiguous_top8():
    _, op = _op("lmdeploy", "fused_single_group_router")
    h = load_harness(op.harness, op.variant)
    inputs = h.make_inputs({"tokens": 64, "dtype": "float32"}, "cpu", 3)
    choice = (inputs["scores"] + inputs["bias"]).sort(dim=-1).values
    assert (choice[:, 1:] - choice[:, :-1]).min() > 1e-3  # far beyond float32 rounding


def test_loader_uses_the_folder_above_the_top_package(tmp_path):
    # SGLang's layout: python/sglang/... with absolute self-imports and a stubbed heavy module.
    pkg = tmp_path / "python" / "eng2" / "kern"
    pkg.mkdir(parents=True)
    (tmp_path / "python" / "eng2" / "__init__.py").write_text("raise RuntimeError('heavy init ran')\n")
    (pkg / "__init__.py").write_text("raise RuntimeError('heavy init ran')\n")
    (pkg / "consts.py").write_text("K = 5\n")
    (pkg / "op.py").write_text("from eng2.kern.consts import K\nfrom eng2_rt.utils import is_hip\n"
                               "def op(x):\n    return x * K + int(is_hip())\n")
    stub = tmp_path / "stub.py"
    stub.write_text("def is_hip():\n    return False\n")
    assert package_name_for(tmp_path, "python/eng2/kern/op.py") == "eng2.kern"
    mod = load_operator_module(tmp_path, "python/eng2/kern/op.py", stubs={"eng2_rt.utils": stub})
    assert mod.op(2) == 10
    for name in [n for n in sys.modules if n.split(".")[0] in ("eng2", "eng2_rt")]:
        del sys.modules[name]


def test_light_import_plugin_runs_tests_without_package_inits(tmp_path):
    root = tmp_path / "repo"
    (root / "heavy" / "kern").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "heavy" / "__init__.py").write_text("import not_installed_heavy_dep\n")
    (root / "heavy" / "utils.py").write_text("import not_installed_heavy_dep\n")
    (root / "heavy" / "kern" / "__init__.py").write_text(
        "import not_installed_heavy_dep\nfrom .double import double\nfrom .other import thing as alias\n")
    (root / "heavy" / "kern" / "double.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "heavy" / "kern" / "other.py").write_text("import not_installed_heavy_dep\nthing = 1\n")
    (root / "tests" / "test_double.py").write_text(
        "from heavy.utils import flag\nfrom heavy.kern import double\n"
        "def test_double():\n    assert flag() and double(4) == 8\n")
    stub = tmp_path / "utils_stub.py"
    stub.write_text("def flag():\n    return True\n")
    assert reexports(root / "heavy/kern/__init__.py", "heavy.kern") == {
        "double": ("heavy.kern.double", "double"), "alias": ("heavy.kern.other", "thing")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
         "-p", "kernelsmith.lightimport", "--light-package", "heavy.kern",
         "--light-stub", f"heavy.utils={stub}", "tests/test_double.py"],
        cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _check_kernel(h, fn, shape, device):
    """Run the kernel on one shape and compare every output with the harness reference."""
    inputs = h.make_inputs(shape, device, 0)
    ret = fn(**inputs)
    outs = tuple(inputs[n] for n in h.outputs) if h.outputs else _as_tuple(ret)
    expected = _as_tuple(h.reference(**inputs))
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected, strict=True):
        # As the referee compares: the tolerance of the kernel's output dtype, values after a cast to
        # float32 (fp8 outputs and float32 references included).
        atol, rtol = h.tolerance_for(str(o.dtype).replace("torch.", ""))
        if o.is_floating_point():
            torch.testing.assert_close(o.float(), e.float(), atol=atol, rtol=rtol)
        else:
            assert torch.equal(o, e)


def _checkout(target_name):
    return upstreamkit.require(target_name)


# The CUDA_ONLY ones need the referee's interpreter stand-ins: test_targets_harness_check.py runs them.
@pytest.mark.parametrize("target_name, op_name",
                         [(t, o) for t, o in OPS if (t, o.split("@")[0]) not in CUDA_ONLY])
def test_real_kernel_files_load_and_match_on_cpu(target_name, op_name):
    root = _checkout(target_name)
    if torch.cuda.is_available():
        pytest.skip("the GPU step covers CUDA machines")
    target, op = _op(target_name, op_name)
    h = load_harness(op.harness, op.variant)
    accept_list_grids()  # as the referee's interpreter backend does (multinomial_sampling's `[batch]`)
    fn = getattr(load_operator_module(root, op.file, tag="t", stubs=target.stubs), op.entry)
    for shape in h.cpu_shapes:
        _check_kernel(h, fn, shape, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("target_name, op_name", OPS)
def test_real_kernel_files_match_on_cuda(target_name, op_name):
    root = _checkout(target_name)
    target, op = _op(target_name, op_name)
    h = load_harness(op.harness, op.variant)
    fn = getattr(load_operator_module(root, op.file, tag="g", stubs=target.stubs), op.entry)
    for shape in h.shapes[:2]:
        _check_kernel(h, fn, shape, "cuda")
