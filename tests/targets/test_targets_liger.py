"""The Liger-Kernel target: its yaml, its harnesses, and its real kernel files from the release
checkout (`kernelsmith checkout liger --from-package`, which scripts/release_checkouts.sh makes;
LIGER_CHECKOUT names another). `harness check` of every operator on CPU is in
test_targets_harness_check.py; the kernels need the interpreter's libdevice and float-argument
stand-ins there, as the referee's workers give them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import upstreamkit

from kernelsmith.cli import main
from kernelsmith.harness.model import load_harness
from kernelsmith.harness.new import write_skeleton
from kernelsmith.loader import load_operator_module
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.release import base_release
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

TARGETS = Path(__file__).resolve().parents[2] / "targets"
YAML = TARGETS / "liger.yaml"
OPS = [op.name for op in load_target(YAML).operators]


def test_the_yaml_pins_a_release_and_names_entries_as_users_find_them():
    target = load_target(YAML)
    assert target.package.spec == "liger-kernel==0.8.5" and target.package.prefix == "src"
    assert target.checked and not target.broken and len(target.operators) >= 5
    entries = {op.name: op.entry for op in target.operators}
    assert entries["layer_norm"] == "LigerLayerNormFunction.apply" and entries["geglu"].endswith(".apply")
    for op in target.operators:
        assert op.file.startswith("src/liger_kernel/ops/") and op.harness.is_file()
        assert op.test == f"python -m pytest -q test/transformers/test_{op.name}.py"


@pytest.mark.parametrize("op_name", OPS)
def test_harness_inputs_and_reference_on_cpu_shapes(op_name):
    h = load_harness(load_target(YAML).operator(op_name).harness)
    assert h.shapes and h.cpu_shapes and h.vary
    for key in h.vary:
        assert all(key in s for s in h.shapes + h.cpu_shapes), key
    for shape in h.cpu_shapes:
        assert shape["dtype"] in ("float16", "float32")  # the interpreter's bf16 math is wrong
        a, b, c = (h.make_inputs(shape, "cpu", seed) for seed in (1, 1, 2))
        tensors = [k for k, v in a.items() if isinstance(v, torch.Tensor)]
        assert all(torch.equal(a[k], b[k]) for k in tensors)
        assert any(not torch.equal(a[k], c[k]) for k in tensors)
        expected = h.reference(**a)
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert expected and all(isinstance(t, torch.Tensor) for t in expected)
    assert all(h.bytes_moved(s) > 0 for s in h.shapes + h.cpu_shapes)


def test_the_release_checkout_holds_the_operator_files():
    root = upstreamkit.require("liger")
    assert base_release(root) in (None, "liger-kernel==0.8.5")
    for op in load_target(YAML).operators:
        assert (root / op.file).is_file(), op.file
    assert (root / "src" / "liger_kernel" / "ops" / "utils.py").is_file()  # calculate_settings


def test_scan_finds_every_entry_in_the_release(capsys):
    import json

    root = upstreamkit.require("liger")
    code = main(["scan", str(YAML), "--checkout", str(root), "--json"])
    doc = json.loads(capsys.readouterr().out)
    problems = {o["name"]: o.get("problems") for o in doc["operators"]}
    assert code == 0 and all(not p for p in problems.values()), problems
    assert set(problems) == set(OPS)


def test_harness_new_reads_the_real_entries(tmp_path):
    root = upstreamkit.require("liger")
    text = YAML.read_text().replace("harness: liger/", f"harness: {tmp_path}/")
    (tmp_path / "liger.yaml").write_text(text)
    target = load_target(tmp_path / "liger.yaml")
    rms = write_skeleton(target, "rms_norm", root).read_text()
    assert ("# The entry returns a tuple (0: Y.view(*shape), 1: X, 2: RSTD, 3: BLOCK_SIZE, 4: num_warps, "
            "5: casting_mode).") in rms
    layer_norm = write_skeleton(target, "layer_norm", root).read_text()
    assert "def reference(X, W, B, eps):" in layer_norm  # forward(ctx, X, W, B, eps) without ctx


def test_the_kernels_run_on_cpu_with_the_interpreter_stand_ins(tmp_path, monkeypatch):
    root = upstreamkit.require("liger")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = load_task(str(YAML), "layer_norm", checkout=str(root), harness=None)
    with Referee(task, device="interpret", seed=0, timeout_s=300, prefork=False) as ref:
        verdict = ref.evaluate(None, timing="none")
    assert verdict.accepted, verdict.feedback()
    assert "float arguments, libdevice math" in verdict.device["name"]  # eps.to(tl.float32), rsqrt


@pytest.mark.gpu
@pytest.mark.parametrize("op_name", OPS)
def test_real_kernel_files_match_on_cuda(op_name):
    root = upstreamkit.require("liger")
    target = load_target(YAML)
    op = target.operator(op_name)
    h = load_harness(op.harness)
    fn = h.callable_of(load_operator_module(root, op.file, tag="g", stubs=target.stubs), op.entry)
    for shape in h.shapes[:2]:
        inputs = h.make_inputs(shape, "cuda", 3)
        copies = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        expected = h.reference(**copies)
        expected = expected if isinstance(expected, tuple) else (expected,)
        ret = fn(**inputs)
        outs = tuple(inputs[n] for n in h.outputs) if h.outputs else ret
        assert len(outs) == len(expected)
        for o, e in zip(outs, expected, strict=True):
            atol, rtol = h.tolerance_for(str(o.dtype).removeprefix("torch."))
            torch.testing.assert_close(o.float(), e.float(), atol=atol, rtol=rtol)


def test_fused_moe_compares_the_pre_activations_the_backward_reads(tmp_path, monkeypatch):
    """A forward whose output is right but whose saved pre-activations are not (zeros here, as a
    candidate that skipped writing them could leave) is rejected: `call` returns them too."""
    root = upstreamkit.require("liger")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    op = load_target(YAML).operator("fused_moe")
    code = (root / op.file).read_text()
    assert code.count("        ctx.save_for_backward(\n") == 1
    skipped = code.replace("        ctx.save_for_backward(\n",
                           "        pre_act = torch.zeros_like(pre_act)\n        ctx.save_for_backward(\n")
    task = load_task(str(YAML), "fused_moe", checkout=str(root), harness=None)
    with Referee(task, device="interpret", seed=0, timeout_s=300, prefork=False) as ref:
        base = ref.evaluate(None, timing="none")
        verdict = ref.evaluate(skipped, candidate_id=1, timing="none")
    assert base.accepted, base.feedback()
    assert not verdict.accepted and "output 1" in verdict.feedback(), verdict.feedback()
    # The oracle tuned the three forward kernels (in liger_kernel.ops.fused_moe_kernels, which base and
    # candidate share); the runner ran them with its choices, on every listed and fresh shape.
    for v in (base, verdict):
        tuned = v.details["autotune"]
        assert {k.rsplit(".", 1)[1] for k in tuned} == {
            "_fused_up_proj_swiglu_kernel", "_fused_down_proj_kernel", "_token_gather_weighted_sum_kernel"}
        assert all(c["source"] == "shared" for keys in tuned.values() for c in keys.values()), tuned
