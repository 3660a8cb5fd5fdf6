"""An expression of literals only (`65536 // 2`, `8 * 32`) is one value: one knob, as the literal it
computes would be, never a multiplier and a divisor whose products launch the same; written back as
one literal. Beside a name (`n // 2`, `x * 4`) a literal stays a scale knob of its own. The file below
has the shape of Liger-Kernel's cross_entropy (a tile cap set per platform at module level)."""

from __future__ import annotations

import ast
import importlib.util

import torch

from kernelsmith.launch.evaluate import LaunchEvaluator
from kernelsmith.launch.tunables import discover, relevant, render, space_points

CODE = '''import torch
import triton
import triton.language as tl


def infer_device():
    return "cuda"


if infer_device() == "xpu":
    MAX_FUSED_SIZE = 4096
else:
    MAX_FUSED_SIZE = 65536 // 2


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK_SIZE: tl.constexpr,
                    BLOCK_HALF: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_SIZE,), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) + 0 * BLOCK_HALF)


def row_sum(x):
    n_rows, V = x.shape
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(V))
    BLOCK_HALF = BLOCK_SIZE // 2
    num_warps = min(triton.cdiv(BLOCK_SIZE, 8 * 32), 8)
    out = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    _row_sum_kernel[(n_rows,)](x, out, x.stride(0), V, BLOCK_SIZE=BLOCK_SIZE, BLOCK_HALF=BLOCK_HALF,
                               num_warps=num_warps)
    return out
'''


def _knobs(code: str):
    return {t.key: t for t in relevant(discover(code), code, "row_sum")}


def _text(code: str, t) -> str:
    (s, e), = t.sites
    return code.encode()[s:e].decode()


def test_a_cap_of_literals_only_is_one_knob_as_its_literal_would_be():
    knobs = _knobs(CODE)
    cap = knobs["None:MAX_FUSED_SIZE"]
    assert (cap.kind, cap.base, _text(CODE, cap)) == ("block", 32768, "65536 // 2")
    assert not [k for k in knobs if k.startswith("None:MAX_FUSED_SIZE|")]  # no |mul, no |div
    # The same knobs, kinds and domains as the file would give with the literal written out.
    literal = _knobs(CODE.replace("65536 // 2", "32768"))
    assert {k: (t.kind, t.base, t.domain) for k, t in knobs.items()} == {
        k: (t.kind, t.base, t.domain) for k, t in literal.items()}
    assert space_points(list(knobs.values())) == space_points(list(literal.values()))


def test_beside_a_name_a_literal_stays_a_scale_and_a_product_of_literals_is_one_divisor():
    knobs = _knobs(CODE)
    half = knobs["row_sum:BLOCK_HALF|div"]  # `BLOCK_SIZE // 2`: a divisor of a computed value
    assert (half.kind, half.base, _text(CODE, half)) == ("scale", 2, "2")
    div = knobs["row_sum:num_warps|div"]  # `cdiv(BLOCK_SIZE, 8 * 32)`: the divisor is 256
    assert (div.kind, div.base, _text(CODE, div)) == ("scale", 256, "8 * 32")
    assert sorted(knobs) == ["None:MAX_FUSED_SIZE", "row_sum:BLOCK_HALF|div",
                             "row_sum:_row_sum_kernel.num_stages", "row_sum:num_warps|cap",
                             "row_sum:num_warps|div"]


def test_a_true_division_of_literals_is_no_knob():
    """`65536 / 2` is a float: no integer can be written back in its place without changing its type."""
    code = CODE.replace("65536 // 2", "65536 / 2")
    assert not [k for k in _knobs(code) if "MAX_FUSED_SIZE" in k]


def test_the_knob_writes_one_literal_back_and_the_launch_takes_it(tmp_path):
    knobs = _knobs(CODE)
    key = "None:MAX_FUSED_SIZE"
    out = render(CODE, list(knobs.values()), {key: 16})
    ast.parse(out)
    changed = [(a, b) for a, b in zip(CODE.splitlines(), out.splitlines(), strict=True) if a != b]
    assert changed == [("    MAX_FUSED_SIZE = 65536 // 2", "    MAX_FUSED_SIZE = 16")]
    path = tmp_path / "capped.py"
    path.write_text(out)  # Triton reads kernel source through inspect: it must be a file
    spec = importlib.util.spec_from_file_location("ks_fixture_capped", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.MAX_FUSED_SIZE == 16
    x = torch.randn(3, 50)  # 50 columns: four tiles of 16
    torch.testing.assert_close(mod.row_sum(x), x.sum(-1))
    # The launch evaluator reads the knob where the expression was.
    ev = LaunchEvaluator(CODE, list(knobs.values()), "row_sum", cuda=True)
    base = {t.key: t.base for t in knobs.values()}
    meta = {"x": torch.empty(3, 50, device="meta")}
    for cap, block in ((32768, 64), (16, 16)):
        (path_,) = ev.signature({**base, key: cap}, meta)
        launch = next(item for item in path_ if item[0] == "_row_sum_kernel")
        assert dict(launch[1])["BLOCK_SIZE"] == block
