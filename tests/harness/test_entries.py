"""Entries as users find them (issue 41, item 1): a forward helper returning a tuple of tensors and
launch settings, an autograd `Function.apply`, a `Class.method`, OUTPUTS as positions of the
returned tuple, a harness `call(entry, inputs)` hook, non-tensor return values left out; through
the referee, `harness check`, `harness new`, `scan` and the harness facts the search and `export`
read. The kernel also reads its float argument with `.to(tl.float32)` (an interpreter stand-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelsmith.errors import ConfigError
from kernelsmith.harness.entry import OutputsError, entry_caller, parse_outputs, resolve_entry
from kernelsmith.harness.new import write_skeleton
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.harness_check import run_probe
from kernelsmith.onboard.scan import _has_entry
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

ROOT = Path(__file__).resolve().parents[2]

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, total_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(x_ptr + offs, mask=m, other=0.0) * scale.to(tl.float32)
    tl.store(y_ptr + offs, y, mask=m)
    tl.store(total_ptr, tl.sum(y, axis=0))


def scale_forward(x, scale):
    """(y, x, total, BLOCK, num_warps, mode), as Liger's forward helpers return."""
    y = torch.empty_like(x)
    total = torch.empty(1, device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(x.numel())
    _scale_kernel[(1,)](x, y, total, x.numel(), scale, BLOCK=block)
    return y, x, total, block, 4, "llama"


class ScaleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale=2.0):
        y, _, total, _, _, _ = scale_forward(x, scale)
        return y, total

    @staticmethod
    def backward(ctx, dy, dtotal):
        return dy, None


class Ops:
    @staticmethod
    def scale(x, scale):
        return scale_forward(x, scale)[0]
'''

HARNESS = '''
import torch

SHAPES = [{"n": 4096}]
CPU_SHAPES = [{"n": 100}, {"n": 37}]
VARY = {"n": [5, 64]}
EXTRA


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(shape["n"], generator=g, device=device), "scale": 1.5}


def reference(x, scale):
    y = x.double() * scale
    return RETURNS


def bytes_moved(shape):
    return 8 * shape["n"]
'''
Y, TOTAL = "y.float()", "y.sum().reshape(1).float()"
CASES = {  # name: (entry, harness lines, what reference returns)
    "positions": ("scale_forward", "OUTPUTS = (0, 2)", f"{Y}, {TOTAL}"),
    "tensors_only": ("scale_forward", "OUTPUTS = None", f"{Y}, x.clone(), {TOTAL}"),
    "apply": ("ScaleFunction.apply", "", f"{Y}, {TOTAL}"),
    "method": ("Ops.scale", "", Y),
    "call": ("scale_forward", "def call(entry, inputs):\n    return entry(**inputs)[2]", TOTAL),
    "not_a_tensor": ("scale_forward", "OUTPUTS = (0, 3)", f"{Y}, {TOTAL}"),
}


def _project(tmp_path: Path, case: str) -> tuple[Path, Path, Path]:
    """(checkout, targets folder, harness path) of a target whose one operator is `case`."""
    entry, extra, returns = CASES[case]
    proj = tmp_path / "proj"
    (proj / "eng").mkdir(parents=True)
    (proj / "eng" / "__init__.py").write_text("")
    (proj / "eng" / "ops.py").write_text(KERNEL)
    folder = tmp_path / "targets"
    (folder / "t").mkdir(parents=True)
    harness = folder / "t" / f"{case}.py"
    harness.write_text(HARNESS.replace("EXTRA", extra).replace("RETURNS", returns))
    (folder / "t.yaml").write_text(f"repo: test/t\nclone_url: {proj}\nbase: main\noperators:\n"
                                   f"  - name: {case}\n    file: eng/ops.py\n    entry: {entry}\n"
                                   f"    harness: t/{case}.py\n")
    return proj, folder, harness


def _task(tmp_path: Path, case: str):
    proj, folder, _ = _project(tmp_path, case)
    return load_task(str(folder / "t.yaml"), case, checkout=str(proj), harness=None)


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))


@pytest.mark.parametrize("case", ["positions", "tensors_only", "apply", "method", "call"])
def test_the_base_is_accepted_by_the_referee(tmp_path, case):
    with Referee(_task(tmp_path, case), device="interpret", seed=1, timeout_s=240, prefork=False) as ref:
        verdict = ref.evaluate(None)
    assert verdict.accepted, verdict.feedback()
    assert "float arguments" in verdict.device["name"]  # scale.to(tl.float32) on a Python float


def test_a_declared_position_that_is_no_tensor_names_the_harness_and_the_field(tmp_path):
    report = run_probe(_task(tmp_path, "not_a_tensor"), "interpret")
    outputs = [p for p in report.problems if p[0] == "OUTPUTS"]
    assert outputs, report.problems
    assert "t/not_a_tensor.py: OUTPUTS[1]: position 3 of what the entry returned is a int" in outputs[0][1]


def test_evaluate_says_which_position_is_no_tensor(tmp_path):
    _, folder, harness = _project(tmp_path, "not_a_tensor")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    out = subprocess.run([sys.executable, "-m", "kernelsmith", "--targets", str(folder), "evaluate", "t",
                          "not_a_tensor", "--device", "interpret", "--checkout", str(tmp_path / "proj")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 2, out.stdout + out.stderr
    what = next(ln for ln in out.stderr.splitlines() if ln.strip().startswith("what:"))
    assert f"{harness}: OUTPUTS[1]: position 3 of what the entry returned is a int, not a tensor" in what
    assert "check: crash" in out.stderr and "import_error" not in out.stderr
    assert "OUTPUTS names a position where the entry returns no tensor" in out.stderr


def test_entry_caller_picks_positions_and_leaves_non_tensors_out():
    y, t = torch.ones(2), torch.zeros(1)
    fn = lambda **kw: (y, 8, "llama", None, t)  # noqa: E731
    assert entry_caller(fn)() == (y, t)
    assert entry_caller(fn, positions=[4, 0])() == (t, y)
    with pytest.raises(OutputsError, match=r"h\.py: OUTPUTS\[1\]: position 2 .* is a str"):
        entry_caller(fn, positions=[0, 2], path="h.py")()
    with pytest.raises(OutputsError, match=r"OUTPUTS\[0\]: position 9, but the entry returned 5"):
        entry_caller(fn, positions=[9], path="h.py")()
    hook = entry_caller(fn, call=lambda entry, inputs: (entry(**inputs)[4], inputs["k"]), path="h.py")
    assert hook(k=3) == (t,)  # what the hook returns, its non-tensors left out too
    named = lambda **kw: None  # noqa: E731 - writes its OUTPUTS inputs, returns nothing
    assert entry_caller(named, names=["out"]) is named


def test_outputs_are_names_or_positions_never_both():
    assert parse_outputs(None, "h.py") == (None, None)
    assert parse_outputs("out", "h.py") == (["out"], None)
    assert parse_outputs((0, 2), "h.py") == (None, [0, 2])
    assert parse_outputs(1, "h.py") == (None, [1])
    for bad, field in (([0, "out"], "OUTPUTS[1]"), ([True], "OUTPUTS[0]"), ([-1], "OUTPUTS[0]"),
                       ([1, 1], "OUTPUTS"), (3.5, "OUTPUTS")):
        with pytest.raises(ConfigError) as e:
            parse_outputs(bad, "h.py")
        assert e.value.field == field and e.value.file == "h.py"


FUNCTIONS = '''
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale=2.0):
        return x * scale

    @staticmethod
    def backward(ctx, dy):
        return dy, None

    @classmethod
    def apply(cls, *args):  # as torch's before 2.13: positional arguments only
        return super().apply(*args)


class Ops:
    @staticmethod
    def twice(x):
        return 2 * x
'''


def test_apply_binds_keyword_inputs_to_forward_by_position(tmp_path):
    import importlib.util
    import inspect

    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    spec = importlib.util.spec_from_file_location("entries_fns", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = torch.ones(3)
    with pytest.raises(TypeError):
        mod.Scale.apply(x=x)
    apply = resolve_entry(mod, "Scale.apply")
    assert list(inspect.signature(apply).parameters) == ["x", "scale"]  # without ctx
    assert torch.equal(apply(x=x), 2 * x) and torch.equal(apply(x=x, scale=3.0), 3 * x)
    assert resolve_entry(mod, "Ops.twice") is mod.Ops.twice
    with pytest.raises(AttributeError, match="defines no 'Ops.missing'"):
        resolve_entry(mod, "Ops.missing")


def test_dotted_entries_in_the_yaml_scan_and_harness_new(tmp_path):
    proj, folder, _ = _project(tmp_path, "apply")
    target = load_target(folder / "t.yaml")
    assert target.operator("apply").entry == "ScaleFunction.apply"
    assert _has_entry(KERNEL, "ScaleFunction.apply") and _has_entry(KERNEL, "Ops.scale")
    assert not _has_entry(KERNEL, "Ops.missing") and not _has_entry(KERNEL, "Nope.apply")
    (folder / "t" / "apply.py").unlink()
    text = write_skeleton(target, "apply", proj).read_text()
    assert "def reference(x, scale" in text and "ctx" not in text.split("def reference")[1].split(")")[0]
    bad = folder / "bad.yaml"
    bad.write_text((folder / "t.yaml").read_text().replace("ScaleFunction.apply", "ScaleFunction..apply"))
    with pytest.raises(ConfigError, match="operators\\[0\\].entry"):
        load_target(bad).operator("apply")


def test_harness_new_lists_what_a_tuple_returning_entry_returns(tmp_path):
    proj, folder, _ = _project(tmp_path, "positions")
    (folder / "t" / "positions.py").unlink()
    text = write_skeleton(load_target(folder / "t.yaml"), "positions", proj).read_text()
    assert "# The entry returns a tuple (0: y, 1: x, 2: total, 3: block, 4: 4, 5: 'llama')." in text


def test_the_facts_carry_positions_and_the_call_hook(tmp_path):
    from kernelsmith.harness.facts import HarnessFacts
    from kernelsmith.harness.gather import gather

    proj, _, harness = _project(tmp_path, "call")
    facts = gather(harness, proj)
    assert facts.call is True and facts.positions is None
    again = HarnessFacts.from_json(json.loads(json.dumps(facts.to_json())), harness)
    assert again.call is True
    proj2, _, harness2 = _project(tmp_path / "p", "positions")
    assert gather(harness2, proj2).positions == [0, 2]
