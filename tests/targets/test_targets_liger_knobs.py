"""The params search on the Liger-Kernel target (targets/liger.yaml, its release checkout): every
operator has launch knobs and every launch value is followed to where it is computed (the warps
`calculate_settings` returns from ops/utils.py, the launcher behind an autograd Function); no knob sits
on a branch that never runs on CUDA, told here by running each enclosing test under CUDA's answers."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest
import upstreamkit

from kernelsmith.launch.follow import Sources
from kernelsmith.launch.syntax import AS_COMPUTED
from kernelsmith.launch.tunables import entry_knobs, render, space_points
from kernelsmith.loader import load_operator_module
from kernelsmith.onboard.config import load_target

TARGET = load_target(upstreamkit.TARGETS / "liger.yaml")
# What the platform queries of these files answer on an NVIDIA GPU.
ON_CUDA = {"infer_device": lambda: "cuda", "is_hip": lambda: False,
           "torch": SimpleNamespace(version=SimpleNamespace(hip=None))}


def _space(op_name: str):
    op = TARGET.operator(op_name)
    checkout = upstreamkit.require("liger")
    code = (checkout / op.file).read_text()
    tunables, unfollowed = entry_knobs(code, op.entry, Sources(checkout, op.file))
    return code, tunables, unfollowed


def _runs_on_cuda(tree: ast.AST, at: int, offsets: list[int]) -> bool:
    """Whether the code at byte offset `at` runs on CUDA as far as platform tests tell: every enclosing
    `if` / `a if t else b` whose test evaluates under ON_CUDA must choose the branch holding it."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If | ast.IfExp):
            continue
        try:
            taken = bool(eval(compile(ast.Expression(node.test), "test", "eval"), dict(ON_CUDA)))  # noqa: S307
        except Exception:  # noqa: BLE001 - a test on the inputs, not the platform: either branch runs
            continue
        body = node.body if isinstance(node.body, list) else [node.body]
        orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
        for branch, runs in ((body, taken), (orelse, not taken)):
            spans = [(offsets[s.lineno - 1] + s.col_offset, offsets[s.end_lineno - 1] + s.end_col_offset)
                     for s in branch]
            if not runs and any(s <= at < e for s, e in spans):
                return False
    return True


@pytest.mark.parametrize("op_name", [op.name for op in TARGET.operators])
def test_every_operator_has_knobs_none_on_a_dead_branch_and_nothing_unfollowed(op_name):
    code, tunables, unfollowed = _space(op_name)
    assert unfollowed == []
    assert any(len(t.domain) > 1 for t in tunables)
    tree = ast.parse(code)
    offsets = [0]
    for line in code.encode().splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    for t in tunables:
        for s, _ in t.sites:
            assert _runs_on_cuda(tree, s, offsets), (t.key, code.encode()[s:s + 40])


def test_cross_entropy_offers_only_the_cuda_values():
    """`MAX_FUSED_SIZE` is 4096 on xpu, 2048 on npu and 65536 // 2 elsewhere; `ce_num_warps` is 16 on
    ROCm: only the CUDA lines hold knobs."""
    code, tunables, _ = _space("cross_entropy")
    lines = code.splitlines()
    data = code.encode()
    sited = {lines[data[:s].count(b"\n")].strip() for t in tunables for s, e in t.sites if s < e}
    assert "MAX_FUSED_SIZE = 65536 // 2" in sited
    assert not sited & {"MAX_FUSED_SIZE = 4096", "MAX_FUSED_SIZE = 2048", "ce_num_warps = 16"}


def test_cross_entropy_tile_cap_of_literals_is_one_knob(tmp_path):
    """`MAX_FUSED_SIZE = 65536 // 2` is one value: one knob of the tile's kind at 32768, never a
    multiplier and a divisor whose products launch the same (65536 // 2 == 131072 // 4: a grid of
    11 x 8 x 6 x 6 x 6 = 19008 points then, 12 x 6 x 6 x 6 now); written back as one literal."""
    code, tunables, _ = _space("cross_entropy")
    caps = [t for t in tunables if "MAX_FUSED_SIZE" in t.key]
    assert [(t.key, t.kind, t.base) for t in caps] == [("None:MAX_FUSED_SIZE", "block", 32768)]
    assert len(caps[0].domain) == 12 and space_points(tunables) == 2592
    out = render(code, tunables, {"None:MAX_FUSED_SIZE": 16384})
    changed = [(a, b) for a, b in zip(code.splitlines(), out.splitlines(), strict=True) if a != b]
    assert changed == [("    MAX_FUSED_SIZE = 65536 // 2", "    MAX_FUSED_SIZE = 16384")]
    op = TARGET.operator("cross_entropy")
    mod = load_operator_module(upstreamkit.require("liger"), op.file, code=out, tag="cap", stubs=TARGET.stubs,
                               source_path=tmp_path / "cross_entropy.py")
    assert mod.MAX_FUSED_SIZE == 16384  # the CUDA branch's value, as the knob set it


@pytest.mark.parametrize("op_name, launches", [
    ("rms_norm", ["_rms_norm_forward_kernel", "_block_rms_norm_forward_kernel"]),
    ("layer_norm", ["_layer_norm_forward_kernel"]),  # behind LigerLayerNormFunction.apply
    ("geglu", ["_geglu_tanh_forward_kernel"]),  # behind LigerGELUMulFunction.apply
])
def test_warps_from_calculate_settings_are_overridden_at_the_launch(op_name, launches):
    """`BLOCK_SIZE, num_warps = calculate_settings(n_cols)` (ops/utils.py): each launch's num_warps is a
    knob whose base keeps calculate_settings' value; another value changes that argument only."""
    code, tunables, _ = _space(op_name)
    overrides = {t.key.split(":")[1]: t for t in tunables if t.computed}
    assert sorted(overrides) == sorted(f"{k}.num_warps" for k in launches)
    for t in overrides.values():
        assert t.base == AS_COMPUTED and t.computed == "num_warps"
        out = render(code, tunables, {t.key: 16})
        (s, e), = t.sites
        assert out == code[: len(code.encode()[:s].decode())] + "16" + code[len(code.encode()[:e].decode()):]


def test_fused_neighborhood_attention_offers_its_tiles_not_its_positional_warps_and_stages():
    """Its `num_stages` and calculate_settings' `num_warps` go by position into kernel parameters of
    those names that the kernels never read (Triton takes launch options from keywords only)."""
    _, tunables, _ = _space("fused_neighborhood_attention")
    assert sorted(t.key.split(":")[1] for t in tunables) == ["BLOCK_SIZE_K|floor", "BLOCK_SIZE_M|cap",
                                                             "BLOCK_SIZE_N|cap"]
