"""`harness check`'s negative controls on one-element outputs (issue 41, item 5): a loss with
`reduction="sum"` and an integer count are one element each; every control must differ from the
base there, so a sound harness is not reported for a control that no tolerance can reject."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelsmith.onboard.harness_check import run_probe
from kernelsmith.onboard.harness_probe import controls
from kernelsmith.onboard.task import load_task
from kernelsmith.referee.checks import correctness as C

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(x * x, axis=0))


@triton.jit
def _count_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum((x > 0).to(tl.int32), axis=0))


def sum_loss(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(1, device=x.device, dtype=torch.float32)
    _sum_kernel[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return out


def count_positive(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(1, device=x.device, dtype=torch.int32)
    _count_kernel[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return out
'''

HARNESS = '''
import torch

SHAPES = [{"n": 4096}]
CPU_SHAPES = [{"n": 100}, {"n": 37}]
VARY = {"n": [5, 64]}


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(shape["n"], generator=g, device=device)}


def reference(x):
    return REFERENCE


def bytes_moved(shape):
    return 4 * shape["n"]
'''
REFERENCES = {"sum_loss": "(x.double() ** 2).sum().reshape(1).float()",
              "count_positive": "(x > 0).sum().reshape(1).to(torch.int32)"}


def _task(tmp_path: Path, op: str):
    proj = tmp_path / "proj"
    (proj / "losses").mkdir(parents=True)
    (proj / "losses" / "__init__.py").write_text("")
    (proj / "losses" / "loss.py").write_text(KERNEL)
    (tmp_path / "targets" / "t").mkdir(parents=True)
    (tmp_path / "targets" / "t" / f"{op}.py").write_text(HARNESS.replace("REFERENCE", REFERENCES[op]))
    yaml = tmp_path / "targets" / "t.yaml"
    yaml.write_text(f"repo: test/t\nclone_url: {proj}\nbase: main\noperators:\n  - name: {op}\n"
                    f"    file: losses/loss.py\n    entry: {op}\n    harness: t/{op}.py\n")
    return load_task(str(yaml), op, checkout=str(proj), harness=None)


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))


@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_a_one_element_output_has_no_false_negative_control(tmp_path, op):
    report = run_probe(_task(tmp_path, op), "interpret")
    assert report.problems == [], report.problems
    assert report.passed > 0


@pytest.mark.parametrize("dtype,values", [
    ("float32", [3.5]), ("float32", 2.5), ("float16", [-2.0]), ("float32", [0.0]), ("int32", [7]),
    ("int64", [0]), ("uint8", [255]), ("bool", [True]), ("float32", [1.0, 2.0, 3.0])])
def test_every_control_differs_from_the_base(dtype, values):
    import torch

    b = torch.tensor(values, dtype=getattr(torch, dtype))
    made = controls(b)
    assert made
    for name, ctrl in made:
        tol = (1e-2, 1e-2)  # the loosest default (float16 / bfloat16)
        if not bool((b != 0).any()) and (name == "zeros" or "perturbation" in name):
            continue  # an all-zero base: scaling or zeroing changes nothing, the harness's problem
        assert C.compare(ctrl, b.clone(), tol, "out", like=b).problem is not None, (dtype, values, name)
