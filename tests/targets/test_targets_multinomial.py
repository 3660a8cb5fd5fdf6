"""LMDeploy multinomial_sampling: exact-in-float32 inputs, the Philox draw, the real kernel on CPU.

The kernel's output is a token id compared exactly, so the harness builds probabilities whose
partial sums are exact in float32 in any order; these tests check that property directly, check
the harness's Philox against Triton's own `tl.rand`, and run the upstream kernel (and block-size
variants of it) under the interpreter against the reference. Tests that need the upstream source
take it from tests/upstreamkit.py (the release checkout scripts/test.sh makes, or LMDEPLOY_CHECKOUT).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
import upstreamkit

from kernelsmith.harness.model import load_harness
from kernelsmith.loader import load_operator_module
from kernelsmith.onboard.config import load_target
from kernelsmith.referee.backend.interpret import accept_list_grids

REPO = Path(__file__).resolve().parents[2]
TARGET = load_target(REPO / "targets" / "lmdeploy.yaml")
OP = TARGET.operator("multinomial_sampling")
H = load_harness(OP.harness)


def _shape(batch, vocab, dist, dtype="float32", indices=True):
    return {"batch": batch, "vocab": vocab, "dist": dist, "indices": indices, "dtype": dtype}


def _chunked_cumsum32(scores: torch.Tensor, block: int, reverse_within: bool) -> torch.Tensor:
    """float32 running sums block by block (as the kernel does, with any BLOCK_N), optionally
    summing each block back to front, so the additions happen in a different order."""
    rows, n = scores.shape
    out = torch.empty(rows, n, dtype=torch.float32)
    acc = torch.zeros(rows, 1, dtype=torch.float32)
    for start in range(0, n, block):
        chunk = scores[:, start:start + block].float()
        if reverse_within:
            total = chunk.flip(-1).cumsum(-1).flip(-1)  # suffix sums, back to front
            part = total[:, :1] - total + chunk  # prefix sums recovered from suffix sums
        else:
            part = chunk.cumsum(-1)
        out[:, start:start + block] = acc + part
        acc = acc + part[:, -1:]
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("dist", ["peaked", "flat", "mixed"])
def test_scores_are_exact_multiples_and_sorted_with_true_indices(dtype, dist):
    shape = _shape(6, 3000, dist, dtype)
    inputs = H.make_inputs(shape, "cpu", 11)
    scores, order = inputs["scores"], inputs["indices"]
    assert scores.dtype == getattr(torch, dtype) and scores.shape == (6, 3000)
    units = scores.double() * 2.0 ** 24
    assert torch.equal(units, units.round())  # whole multiples of 2**-24
    assert (scores.double()[:, 1:] <= scores.double()[:, :-1]).all()  # descending, as the kernel assumes
    totals = units.sum(-1)
    assert (totals <= 2 ** 24).all()
    if dtype == "float32":
        assert (totals == 2 ** 24).all()  # every draw lands on a token
    else:
        assert (totals > 0.99 * 2 ** 24).all()  # truncation to 8/11 bits loses a little mass only
    assert torch.equal(order.sort(-1).values, torch.arange(3000).expand(6, -1))  # a permutation per row
    if dist == "peaked":
        assert (scores[:, 0].float() >= 0.125).all()  # 50-99% on 1-4 tokens
    if dist == "flat":
        assert (scores[:, 0].float() < 0.01).all()


@pytest.mark.parametrize("block", [1, 7, 128, 1024])
def test_float32_running_sums_do_not_depend_on_order(block):
    for dist in ("peaked", "flat"):
        scores = H.make_inputs(_shape(4, 5000, dist), "cpu", 3)["scores"]
        exact = scores.double().cumsum(-1)
        for reverse in (False, True):
            got = _chunked_cumsum32(scores, block, reverse)
            assert torch.equal(got.double(), exact), (dist, block, reverse)


def test_plain_softmax_scores_would_not_be_order_independent():
    # Why the harness quantises: ordinary float32 probabilities give order-dependent sums.
    p = torch.softmax(0.5 * torch.randn(4, 5000, generator=torch.Generator().manual_seed(0)), -1)
    p = p.sort(-1, descending=True).values
    assert not torch.equal(_chunked_cumsum32(p, 128, False), _chunked_cumsum32(p, 1024, True))


@triton.jit
def _rand_kernel(seeds, offsets, out):
    i = tl.program_id(0)
    seed = tl.load(seeds + i)
    offset = tl.load(offsets + i).to(tl.int32)  # as the kernel under test reads its offset
    tl.store(out + i, tl.rand(seed, offset))


def _triton_uniforms(seeds, offsets):
    out = torch.empty(seeds.numel(), dtype=torch.float32, device=seeds.device)
    _rand_kernel[(seeds.numel(),)](seeds, offsets, out)
    return out


def _draw_cases(device):
    g = torch.Generator().manual_seed(5)
    seeds = torch.randint(0, 2 ** 32, (48,), generator=g)
    offsets = torch.randint(0, 2 ** 20, (48,), generator=g)
    # Edge cases: zero, sign bits of the low word, a high key word, offsets past int32.
    seeds[:6] = torch.tensor([0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 40 + 7, 2 ** 62 + 3])
    offsets[:6] = torch.tensor([0, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 5, 7, 2 ** 33 - 1])
    return seeds.to(device), offsets.to(device)


@triton.jit
def _fill_kernel(out, value):
    tl.store(out + tl.program_id(0), value)


def test_interpreter_accepts_list_grids_after_the_backend_shim():
    if torch.cuda.is_available():
        pytest.skip("compiled Triton takes list grids itself")
    accept_list_grids()
    accept_list_grids()  # idempotent: wraps once
    out = torch.zeros(4, dtype=torch.int32)
    _fill_kernel[[4]](out, 7)
    assert out.tolist() == [7, 7, 7, 7]
    _fill_kernel[lambda meta: [3]](out, 9)
    assert out.tolist() == [9, 9, 9, 7]


def test_philox_uniforms_match_triton_rand_in_the_interpreter():
    if torch.cuda.is_available():
        pytest.skip("the GPU test covers CUDA machines")
    seeds, offsets = _draw_cases("cpu")
    expected = _triton_uniforms(seeds, offsets)
    got = H.module.uniforms(seeds, offsets)
    assert torch.equal(got, expected)
    assert 0.0 <= got.min() and got.max() < 1.0


@pytest.mark.gpu
def test_philox_uniforms_match_triton_rand_on_cuda():
    seeds, offsets = _draw_cases("cuda")
    assert torch.equal(H.module.uniforms(seeds, offsets), _triton_uniforms(seeds, offsets).cpu())


def test_reference_picks_the_token_where_the_draw_lands():
    inputs = H.make_inputs(_shape(5, 400, "mixed"), "cpu", 2)
    u = H.module.uniforms(inputs["seeds"], inputs["offsets"]).double()
    got = H.reference(**inputs)
    cum = inputs["scores"].double().cumsum(-1)
    for row in range(5):
        pos = int((cum[row] < u[row]).sum())  # tokens whose running sum stays below the draw
        assert cum[row, pos] >= u[row] and (pos == 0 or cum[row, pos - 1] < u[row])
        assert got[row] == inputs["indices"][row, pos]
    assert torch.equal(H.reference(**{**inputs, "indices": None}), got.new_tensor(
        [int((cum[r] < u[r]).sum()) for r in range(5)]))


def test_reference_returns_the_first_index_when_the_draw_passes_the_total():
    # float16 rows sum to a little under 1; the kernel then keeps indices[:, 0] (its initial output).
    inputs = H.make_inputs(_shape(2, 50, "flat", "float16"), "cpu", 0)
    inputs["scores"] = torch.zeros_like(inputs["scores"])
    inputs["scores"][:, 0] = 2.0 ** -24  # total far below any draw
    assert torch.equal(H.reference(**inputs), inputs["indices"][:, 0])


def _checkout() -> Path:
    return upstreamkit.require("lmdeploy")


def _variant(root: Path, tmp_path: Path, tag: str, old: str, new: str):
    """The upstream kernel with one edit, loaded as a candidate would be."""
    code = (root / OP.file).read_text()
    assert code.count(old) == 1, old
    return getattr(load_operator_module(root, OP.file, code=code.replace(old, new), tag=tag,
                                        source_path=tmp_path / tag / "multinomial_sampling.py"), OP.entry)


CHECK_SHAPES = [_shape(3, 300, "mixed"), _shape(2, 200, "flat", "float16", indices=False),
                _shape(5, 1000, "flat"), _shape(4, 130, "peaked", "float16")]


def test_real_kernel_and_block_size_variants_match_the_reference(tmp_path):
    root = _checkout()
    if torch.cuda.is_available():
        pytest.skip("the GPU step covers CUDA machines")
    accept_list_grids()  # the kernel launches with `grid = [batch_size]`
    fns = {"base": getattr(load_operator_module(root, OP.file, tag="msbase"), OP.entry)}
    for block in (32, 1024):
        fns[f"b{block}"] = _variant(root, tmp_path, f"msb{block}", "BLOCK_N = 128", f"BLOCK_N = {block}")
    for shape in CHECK_SHAPES:
        for seed in (0, 1):
            inputs = H.make_inputs(shape, "cpu", seed)
            expected = H.reference(**inputs)
            for name, fn in fns.items():
                out = fn(**inputs)
                assert out.dtype == expected.dtype and torch.equal(out, expected), (name, shape, seed)


def test_a_kernel_that_ignores_the_offset_is_caught(tmp_path):
    root = _checkout()
    if torch.cuda.is_available():
        pytest.skip("the GPU step covers CUDA machines")
    accept_list_grids()
    wrong = _variant(root, tmp_path, "msoff", "samp = tl.rand(seed, offset)",
                     "samp = tl.rand(seed, offset * 0)")
    inputs = H.make_inputs(_shape(8, 300, "flat"), "cpu", 4)
    assert not torch.equal(wrong(**inputs), H.reference(**inputs))


def test_upstream_test_import_resolves_to_the_kernel_through_the_light_plugin():
    root = _checkout()
    code = ("from kernelsmith.lightimport import install_light_package, install_stub\n"
            "import sys\n"
            f"install_light_package('lmdeploy.pytorch.kernels.cuda', [{str(root)!r}])\n"
            f"install_stub('lmdeploy.utils', {str(OP.harness.parent / 'stubs' / 'lmdeploy_utils.py')!r})\n"
            "from lmdeploy.utils import is_bf16_supported\n"
            "from lmdeploy.pytorch.kernels.cuda import multinomial_sampling\n"
            "print(multinomial_sampling.__module__, multinomial_sampling.__name__,"
            " callable(is_bf16_supported))\n"
            "print(sorted(m for m in sys.modules if m.startswith('lmdeploy')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, mods = proc.stdout.splitlines()[:2]
    assert first == "lmdeploy.pytorch.kernels.cuda.multinomial_sampling multinomial_sampling True"
    assert "lmdeploy.messages" not in mods  # the package __init__ files did not run
