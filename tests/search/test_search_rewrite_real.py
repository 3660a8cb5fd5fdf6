"""The rewrite mutator on real kernels: the demo's (judged by the interpreter referee), and where a
checkout is at hand (tests/upstreamkit.py: the release checkouts, or LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT),
LMDeploy's apply_rotary_pos_emb and silu_and_mul, SGLang's merge_state and gelu_and_mul,
Liger-Kernel's norms and swiglu and Unsloth's swiglu and geglu_backward: each gets valid rewrite
proposals whose knobs the params search finds; the CPU-runnable ones are checked against their
harness references on the listed CPU shapes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import upstreamkit

from kernelsmith.launch.tunables import discover, relevant
from kernelsmith.loader import load_operator_module
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee
from kernelsmith.search.mutators.rewrite import RewriteMutator

ROOT = Path(__file__).resolve().parents[2]


def _proposals(task) -> list:
    log: list[str] = []
    mutator = RewriteMutator(task, note=log.append)
    mutator.sync([{"id": 1, "mutator": "base", "params": None}])
    base = {"id": 1, "mutator": "base", "code": task.base_code}
    out = []
    while (p := mutator.propose(base, [], None, set())) is not None:
        out.append(p)
    assert out, log
    return out


def _first_round(p) -> bool:
    """A proposal at its transformation's default knob (or one without a knob)."""
    return not p.params["knobs"] or 4 in p.params["knobs"].values()


def _knobs_found(code: str, entry: str, params: dict) -> bool:
    keys = {t.key.rsplit(":", 1)[-1] for t in relevant(discover(code), code, entry)}
    return set(params["knobs"]) <= keys


@pytest.mark.parametrize("op", ["rms_norm", "silu_and_mul"])
def test_demo_kernels_get_accepted_rewrites(op):
    task = load_task(str(ROOT / "targets" / "demo.yaml"), op, checkout=str(ROOT / "examples" / "miniserve"))
    proposals = _proposals(task)
    firsts = [p for p in proposals if _first_round(p)]
    assert {p.params["transform"] for p in firsts} == {"widen", "coarsen", "persistent"}
    for p in proposals:
        ast.parse(p.code)
        assert _knobs_found(p.code, task.operator.entry, p.params)
    with Referee(task, device="interpret") as referee:
        for p in firsts:
            verdict = referee.evaluate(p.code, candidate_id=1).to_json()
            assert verdict["accepted"], (p.params["key"], verdict.get("reason"), verdict.get("error"))


def _check_on_cpu_shapes(task, code: str, tmp_path: Path) -> None:
    """The candidate's outputs match the harness reference on every CPU shape (in this process)."""
    h = task.harness
    module = load_operator_module(task.root, task.operator.file, code=code, tag="rw",
                                  source_path=tmp_path / Path(task.operator.file).name,
                                  stubs=task.target.stubs)
    entry = getattr(module, task.operator.entry)
    for shape in h.cpu_shapes:
        inputs = h.make_inputs(dict(shape), "cpu", 5)
        expected = h.reference(**{k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        got = entry(**inputs)
        outs = [inputs[n] for n in h.outputs] if h.outputs else got
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        for o, e in zip(outs, expected, strict=True):
            atol, rtol = h.tolerance_for(str(o.dtype).removeprefix("torch."))
            torch.testing.assert_close(o.float(), e.to(o.dtype).float(), atol=atol, rtol=rtol)


REAL = [
    ("lmdeploy", "apply_rotary_pos_emb", True),
    ("lmdeploy", "silu_and_mul", False),  # its imports query the CUDA driver
    ("sglang", "merge_state", True),
]


@pytest.mark.parametrize(("target", "op", "cpu"), REAL, ids=[f"{t}-{o}" for t, o, _ in REAL])
def test_real_kernels_get_valid_rewrites(target, op, cpu, tmp_path):
    checkout = upstreamkit.require(target)
    task = load_task(str(ROOT / "targets" / f"{target}.yaml"), op, checkout=str(checkout))
    proposals = _proposals(task)
    for p in proposals:
        ast.parse(p.code)
        assert _knobs_found(p.code, task.operator.entry, p.params)
    if cpu and not torch.cuda.is_available():
        for p in proposals:
            if _first_round(p):
                _check_on_cpu_shapes(task, p.code, tmp_path)


# Liger launches its norms with `**kernel_args` (empty but on XPU), casts the program id with
# `.to(tl.int64)` (the persistent rewrite's loop variable), takes rsqrt from libdevice (the
# widening's per-row value) and calls its own jit `silu(x)` in swiglu; Unsloth launches with
# `grid = lambda meta: (cdiv(n, meta["BLOCK_SIZE"]),)`.
# SGLang's gelu_and_mul raises under a constexpr branch.
FOLLOWED = [("liger", "layer_norm"), ("liger", "rms_norm"), ("liger", "swiglu"), ("unsloth", "swiglu"),
            ("unsloth", "geglu_backward"), ("sglang", "gelu_and_mul")]


@pytest.mark.parametrize(("target", "op"), FOLLOWED, ids=[f"{t}-{o}" for t, o in FOLLOWED])
def test_upstream_kernels_get_accepted_rewrites_of_every_kind(target, op):
    checkout = upstreamkit.require(target)
    task = load_task(str(ROOT / "targets" / f"{target}.yaml"), op, checkout=str(checkout))
    firsts = [p for p in _proposals(task) if _first_round(p)]
    assert {p.params["transform"] for p in firsts} >= {"coarsen", "persistent", "widen"}
    with Referee(task, device="interpret") as referee:
        for p in firsts:
            verdict = referee.evaluate(p.code, candidate_id=1).to_json()
            assert verdict["accepted"], (p.params["key"], verdict.get("reason"), verdict.get("error"))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["merge_state", "row_rms", "head_scale"])
def test_every_default_rewrite_compiles_and_is_correct_on_cuda(op):
    """Triton's GPU compiler is stricter than the interpreter: every default-knob rewrite of the test
    kernels must build and pass the referee's checks on CUDA (no timing)."""
    data = Path(__file__).parent / "data" / "rewrite"
    task = load_task(str(data / "rewrite.yaml"), op, checkout=str(data / "src"))
    firsts = [p for p in _proposals(task) if _first_round(p)]
    with Referee(task, device="cuda") as referee:
        for p in firsts:
            verdict = referee.evaluate(p.code, candidate_id=1, timing="none").to_json()
            assert verdict["accepted"], (p.params["key"], verdict.get("reason"), verdict.get("error"))


@pytest.mark.gpu
def test_merge_state_rewrites_compile_and_are_correct_on_cuda():
    checkout = upstreamkit.require("sglang")
    task = load_task(str(ROOT / "targets" / "sglang.yaml"), "merge_state", checkout=str(checkout))
    firsts = [p for p in _proposals(task) if _first_round(p)]
    with Referee(task, device="cuda") as referee:
        for p in firsts:
            verdict = referee.evaluate(p.code, candidate_id=1, timing="none").to_json()
            assert verdict["accepted"], (p.params["key"], verdict.get("reason"), verdict.get("error"))


@pytest.mark.gpu
@pytest.mark.parametrize(("target", "op"), FOLLOWED, ids=[f"{t}-{o}" for t, o in FOLLOWED])
def test_upstream_rewrites_of_every_kind_compile_and_are_correct_on_cuda(target, op):
    """The rewrites above, built by Triton's GPU compiler and checked by the referee on CUDA."""
    checkout = upstreamkit.require(target)
    task = load_task(str(ROOT / "targets" / f"{target}.yaml"), op, checkout=str(checkout))
    firsts = [p for p in _proposals(task) if _first_round(p)]
    with Referee(task, device="cuda") as referee:
        for p in firsts:
            verdict = referee.evaluate(p.code, candidate_id=1, timing="none").to_json()
            assert verdict["accepted"], (p.params["key"], verdict.get("reason"), verdict.get("error"))

