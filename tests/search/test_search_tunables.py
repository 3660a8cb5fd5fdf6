"""Tunables from the syntax tree: demo kernels, an upstream-style file with triton.Config lists."""

from __future__ import annotations

from pathlib import Path

import torch

from kernelsmith.loader import load_operator_module
from kernelsmith.search.mutators.tunables import discover, relevant, render, render_table

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "examples" / "miniserve" / "miniserve" / "kernels"
UPSTREAM = Path(__file__).parent / "data" / "upstream_style.py"


def _by_key(code, entry):
    return {t.key: t for t in relevant(discover(code), code, entry)}


def test_demo_silu_and_mul():
    ts = _by_key((KERNELS / "silu_and_mul.py").read_text(), "silu_and_mul")
    block, warps = ts["silu_and_mul:BLOCK"], ts["silu_and_mul:_silu_and_mul_kernel.num_warps"]
    assert (block.kind, block.base, warps.kind, warps.base) == ("block", 64, "num_warps", 1)
    assert max(block.domain) >= 64 * 64 and all(v & (v - 1) == 0 for v in block.domain)
    assert warps.domain == [1, 2, 4, 8, 16, 32]


def test_demo_rms_norm_only_what_the_entry_reaches():
    code = (KERNELS / "rms_norm.py").read_text()
    assert len(discover(code)) == 2  # the fused kernel's launch too
    assert list(_by_key(code, "rms_norm")) == ["rms_norm:_rms_norm_kernel.num_warps"]


def test_upstream_style_config_lists_heuristics_and_asserts():
    code = UPSTREAM.read_text()
    ts = {t.key: t for t in discover(code)}
    assert {
        f"config[{i}].{k}"
        for i in (0, 1)
        for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
    } <= set(ts)
    assert ts["config[1].BLOCK_M"].base == 128 and ts["config[0].GROUP_M"].kind == "group"
    assert max(ts["config[0].BLOCK_K"].domain) == 256  # tl.static_assert(BLOCK_K <= 256)
    assert max(ts["scale_:block#1"].domain) == 8192  # assert block <= 8192
    assert ts["scale_:block#0"].base == 128 and ts["scale_:warps#1"].kind == "num_warps"
    assert ts["scale_:if[0]"].base == 4096  # the size threshold of the heuristic
    assert ts["scale_:_scale_kernel.num_stages"].domain == [1, 2, 3, 4, 5, 6]
    out = render(code, list(ts.values()), {"config[0].BLOCK_M": 256, "scale_:warps#0": 8})
    assert '"BLOCK_M": 256, "BLOCK_N": 64' in out and "warps = 8" in out and "warps = 4" in out


def test_per_shape_table_runs_and_picks_by_size(tmp_path):
    code = (KERNELS / "silu_and_mul.py").read_text()
    ts = relevant(discover(code), code, "silu_and_mul")
    rows = [
        {"silu_and_mul:BLOCK": 32, "silu_and_mul:_silu_and_mul_kernel.num_warps": 2},
        {"silu_and_mul:BLOCK": 256, "silu_and_mul:_silu_and_mul_kernel.num_warps": 4},
    ]
    table = render_table(code, ts, [500, None], rows, {})
    assert "_KS_CONFIGS" in table and "# kernelsmith: hotspot\n@triton.jit" in table
    mod = load_operator_module(
        ROOT / "examples" / "miniserve",
        "miniserve/kernels/silu_and_mul.py",
        code=table,
        tag="table_test",
        source_path=tmp_path / "silu_and_mul.py",
    )
    assert (
        mod._ks_config(torch.empty(400))["BLOCK"] == 32 and mod._ks_config(torch.empty(600))["BLOCK"] == 256
    )
    for tokens, d in ((3, 50), (4, 200)):  # one shape per bucket, under the interpreter on CPU
        x = torch.randn(tokens, 2 * d)
        out = torch.empty(tokens, d)
        mod.silu_and_mul(out, x)
        torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :d]) * x[:, d:])
