"""What the Triton interpreter lacks, given to kernels on CPU (issue 41, item 2): libdevice math
(imported from triton.language.extra.libdevice, whose functions are declarations the compiler
replaces; through the module; the CUDA versions), float arguments as fp32 scalars
(`eps.to(tl.float32)`) and `tl.range` loop variables as scalar tensors (`item.to(tl.int64)`). A
kernel line the interpreter still cannot run is named as such, and only a file that does not load
is an import_error.

The stand-ins patch process globals: the kernels run in a child process, as in the referee.
"""

import math
from pathlib import Path

import pytest
import torch
from referee_helpers import run_json_child

from kernelsmith.cli import main
from kernelsmith.onboard.harness_check import run_probe
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee
from kernelsmith.referee.checks.diagnose import INTERPRETER_GAP

CHILD = r'''
import json, os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.libdevice import erf, rsqrt, tanh
from kernelsmith.referee.backend.interpret import InterpretBackend

backend = InterpretBackend()
backend.init_context()


@triton.jit
def math_kernel(x_ptr, out_ptr, eps, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    e = eps.to(tl.float32)
    tl.store(out_ptr + 0 * BLOCK + offs, tanh(x))
    tl.store(out_ptr + 1 * BLOCK + offs, rsqrt(x * x + e))
    tl.store(out_ptr + 2 * BLOCK + offs, erf(x))
    tl.store(out_ptr + 3 * BLOCK + offs, libdevice.log1p(x * x))
    tl.store(out_ptr + 4 * BLOCK + offs, tl.extra.cuda.libdevice.pow(x * x, x))
    tl.store(out_ptr + 5 * BLOCK + offs, libdevice.isnan(x / x).to(tl.float32))
    tl.store(out_ptr + 6 * BLOCK + offs, libdevice.fma(x, x, x))


@triton.jit
def f64_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tanh(tl.load(x_ptr + offs)))


@triton.jit
def bessel_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, libdevice.j0(tl.load(x_ptr + offs)))


x = torch.tensor([-3.0, -0.5, 0.0, 0.25, 1.0, 2.5, 7.0, 0.1])
out = torch.empty(7 * 8)
math_kernel[(1,)](x, out, 1e-6, BLOCK=8)
result = {"math": out.view(7, 8).tolist()}
x64 = x.double()
out64 = torch.empty(8, dtype=torch.float64)
f64_kernel[(1,)](x64, out64, BLOCK=8)
result["f64"] = out64.tolist()
try:
    bessel_kernel[(1,)](x, torch.empty(8), BLOCK=8)
except Exception as e:
    result["bessel"] = f"{type(e).__name__}: {e}"
result["info"] = backend.info()
print(json.dumps(result))
'''


@pytest.fixture(scope="module")
def child():
    return run_json_child(CHILD)


def test_libdevice_math_and_a_float_argument_under_the_interpreter(child):
    x = torch.tensor([-3.0, -0.5, 0.0, 0.25, 1.0, 2.5, 7.0, 0.1])
    got = torch.tensor(child["math"])
    expected = torch.stack([torch.tanh(x), torch.rsqrt(x * x + 1e-6), torch.erf(x), torch.log1p(x * x),
                            torch.pow(x * x, x), torch.tensor([0.0, 0, 1, 0, 0, 0, 0, 0]),
                            (x.double() * x.double() + x.double()).float()])
    # pow(0, 0) is 1 (C's pow), torch's too
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-7), (got - expected).abs().max()
    assert child["f64"] == [math.tanh(v) for v in x.double().tolist()]
    assert {"libdevice math", "float arguments"} <= set(child["info"]["stand_ins"])


def test_a_libdevice_function_without_a_stand_in_says_so(child):
    assert "NotImplementedError" in child["bessel"] and "__nv_j0f" in child["bessel"]


RANGE_CHILD = r'''
import json, os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from kernelsmith.referee.backend.interpret import InterpretBackend

backend = InterpretBackend()
backend.init_context()


@triton.jit
def rows_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr, PARTS: tl.constexpr):
    # a persistent loop: the loop variable used as compiled Triton types it (an int32 scalar)
    for item in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row = item.to(tl.int64)
        cols = tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for part in tl.static_range(PARTS):  # unrolled with constants: stays a Python int
            acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0) * (part + 1)
        tl.store(out_ptr + row * n_cols + cols, acc, mask=cols < n_cols)


@triton.jit
def wide_kernel(out_ptr, start):
    for i in tl.range(start, start + 2):
        tl.store(out_ptr + (i - start), i.to(tl.float64))


x = torch.arange(15, dtype=torch.float32).view(5, 3)
out = torch.empty_like(x)
rows_kernel[(2,)](x, out, 5, 3, BLOCK=4, PARTS=3)
wide = torch.empty(2, dtype=torch.float64)
wide_kernel[(1,)](wide, 2**40)
print(json.dumps({"rows": out.tolist(), "wide": wide.tolist(), "info": backend.info()}))
'''


def test_a_tl_range_variable_is_a_scalar_tensor_and_a_static_range_one_an_int():
    got = run_json_child(RANGE_CHILD)
    x = torch.arange(15, dtype=torch.float32).view(5, 3)
    assert got["rows"] == (x * 6).tolist()
    assert got["wide"] == [2.0**40, 2.0**40 + 1]  # bounds past int32: an int64 variable
    assert "tl.range variables" in got["info"]["stand_ins"]


ASM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _asm_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y, mask=offs < n)


def copy(x):
    y = torch.empty_like(x)
    _asm_kernel[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y
'''
HARNESS = '''
import torch

SHAPES = [{"n": 4096}]
CPU_SHAPES = [{"n": 100}]
VARY = {"n": [5, 64]}


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(shape["n"], generator=g, device=device)}


def reference(x):
    return x.clone()
'''


def _task(tmp_path: Path, kernel: str):
    proj = tmp_path / "proj"
    (proj / "eng").mkdir(parents=True)
    (proj / "eng" / "__init__.py").write_text("")
    (proj / "eng" / "kern.py").write_text(kernel)
    (tmp_path / "targets" / "t").mkdir(parents=True)
    (tmp_path / "targets" / "t" / "copy.py").write_text(HARNESS)
    yaml = tmp_path / "targets" / "t.yaml"
    yaml.write_text(f"repo: test/t\nclone_url: {proj}\nbase: main\noperators:\n  - name: copy\n"
                    "    file: eng/kern.py\n    entry: copy\n    harness: t/copy.py\n")
    return load_task(str(yaml), "copy", checkout=str(proj), harness=None)


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


def _kernel_line(task) -> str:
    lines = task.base_code.splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "inline_asm_elementwise" in text)
    return f"kernel {task.root / 'eng' / 'kern.py'}:{line} in _asm_kernel: NotImplementedError"


def test_a_kernel_line_the_interpreter_cannot_run_is_named_not_a_load_error(tmp_path):
    task = _task(tmp_path, ASM)
    with Referee(task, device="interpret", seed=0, timeout_s=240, prefork=False) as ref:
        verdict = ref.evaluate(None)
    assert verdict.reason == "crash", verdict.feedback()
    message = verdict.details["messages"][0]
    assert message.startswith(_kernel_line(task)) and message.endswith(INTERPRETER_GAP)


def test_evaluate_prints_the_kernel_line_and_harness_check_too(tmp_path, capsys):
    task = _task(tmp_path, ASM)
    code = main(["evaluate", str(task.target.path), "copy", "--checkout", str(task.root),
                 "--device", "interpret"])
    err = capsys.readouterr().err
    assert code == 2
    what = next(ln for ln in err.splitlines() if ln.strip().startswith("what:"))
    assert _kernel_line(task) in what and INTERPRETER_GAP in what
    assert "check: crash" in err and "import_error" not in err and "cannot load" not in err
    assert "likely fix: the kernel fails inside the Triton interpreter" in err
    problems = run_probe(task, "interpret").problems
    assert any(check == "base" and _kernel_line(task) in msg and INTERPRETER_GAP in msg
               for check, msg, _ in problems), problems


def test_a_file_that_does_not_load_is_still_an_import_error(tmp_path):
    task = _task(tmp_path, "import not_installed_anywhere_xyz\n" + ASM)
    with Referee(task, device="interpret", seed=0, timeout_s=240, prefork=False) as ref:
        verdict = ref.evaluate(None)
    assert verdict.reason == "import_error"
    assert INTERPRETER_GAP not in (verdict.error or "")
