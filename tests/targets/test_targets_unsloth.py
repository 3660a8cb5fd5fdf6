"""The Unsloth target (targets/unsloth.yaml): its stand-in for `unsloth.kernels.utils` against the
real module, its harnesses on CPU shapes, `harness check` and `evaluate` on the interpreter, and the
params search's knobs of each operator. Needs the release checkout (tests/upstreamkit.py)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import upstreamkit

from kernelsmith.harness.model import load_harness
from kernelsmith.launch.follow import Sources
from kernelsmith.launch.tunables import entry_knobs
from kernelsmith.loader import install_stubs
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.harness_check import check_harness
from kernelsmith.onboard.task import load_task

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "targets" / "unsloth.yaml"
TARGET = load_target(YAML)
OPS = [op.name for op in TARGET.operators]


def test_three_or_more_operators_of_two_kinds_with_their_stub():
    assert TARGET.checked and len(OPS) >= 3 and all(op.harness.is_file() for op in TARGET.operators)
    inplace = [op.name for op in TARGET.operators if load_harness(op.harness).inplace]
    assert inplace and len(inplace) < len(OPS)  # in-place backward kernels beside elementwise forwards
    assert TARGET.stubs["unsloth.kernels.utils"].is_file()


def _bound(tree: ast.AST) -> set[str]:
    """Names a module binds: assignment targets and functions, anywhere in it."""
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign | ast.AnnAssign):
            target = n.target if isinstance(n, ast.AnnAssign) else n.targets[0]
            names |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


def test_the_stub_answers_as_the_real_utils_module():
    """Every name the stub defines is one the real module defines, and calculate_settings (taken out of
    the real module's text: the module itself imports bitsandbytes and unsloth_zoo) gives the same
    (BLOCK_SIZE, num_warps) for every row length up to the limit."""
    real = (upstreamkit.require("unsloth") / "unsloth" / "kernels" / "utils.py").read_text()
    tree = ast.parse(real)
    stub_tree = ast.parse(TARGET.stubs["unsloth.kernels.utils"].read_text())
    stubbed = _bound(ast.Module(stub_tree.body, []))
    assert stubbed <= _bound(tree)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "calculate_settings")
    space = {"next_power_of_2": triton.next_power_of_2, "MAX_FUSED_SIZE": 65536}
    exec(compile(ast.Module([fn], []), "utils.py", "exec"), space)  # noqa: S102 - upstream's own text
    install_stubs(dict(TARGET.stubs))
    stub = sys.modules["unsloth.kernels.utils"]
    for n in [1, 7, 100, 2047, 2048, 5000, 8192, 20000, 32768, 65536]:
        assert stub.calculate_settings(n) == space["calculate_settings"](n), n
    with pytest.raises(RuntimeError):
        stub.calculate_settings(65537)


@pytest.mark.parametrize("op_name", OPS)
def test_harness_inputs_and_reference_on_cpu_shapes(op_name):
    h = load_harness(TARGET.operator(op_name).harness)
    for shape in h.cpu_shapes:
        a, b, c = (h.make_inputs(shape, "cpu", seed) for seed in (1, 1, 2))
        assert all(torch.equal(a[k], b[k]) for k in a) and any(not torch.equal(a[k], c[k]) for k in a)
        before = {k: v.clone() for k, v in a.items()}
        expected = h.reference(**a)
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert all(torch.equal(before[k], a[k]) for k in a)  # the reference writes nothing
        for i, e in enumerate(expected):
            assert torch.isfinite(e.float()).all()
            if h.outputs:
                assert (e.shape, e.dtype) == (a[h.outputs[i]].shape, a[h.outputs[i]].dtype)
        assert h.bytes_moved(shape) > 0


@pytest.mark.parametrize("op_name", OPS)
def test_harness_check_passes_on_cpu(op_name, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = load_task(str(YAML), op_name, checkout=str(upstreamkit.require("unsloth")))
    report = check_harness(task, "interpret", timeout_s=300)
    assert report.sound, "\n".join(report.lines())
    assert report.passed >= 20


@pytest.mark.parametrize("op_name", OPS)
def test_the_base_is_accepted_on_cpu(op_name, tmp_path):
    checkout = upstreamkit.require("unsloth")
    out = subprocess.run(
        [sys.executable, "-m", "kernelsmith", "evaluate", str(YAML), op_name, "--checkout", str(checkout),
         "--device", "interpret", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp_path / "triton")))
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["accepted"] is True


@pytest.mark.parametrize("op_name", OPS)
def test_the_params_search_has_knobs_and_follows_every_launch_value(op_name):
    checkout = upstreamkit.require("unsloth")
    op = TARGET.operator(op_name)
    code = (checkout / op.file).read_text()
    tunables, unfollowed = entry_knobs(code, op.entry, Sources(checkout, op.file))
    assert unfollowed == []
    assert {t.key.rsplit(".", 1)[-1].rsplit(":", 1)[-1] for t in tunables if len(t.domain) > 1} == {
        "BLOCK_SIZE", "num_warps"}
