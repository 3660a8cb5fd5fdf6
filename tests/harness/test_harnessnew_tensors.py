"""`harness new` makes tensors as the entry uses them (issue 41, item 7): the rank and dimension
names from how the code unpacks and indexes each argument, integer and bool tensors from how it
uses them (made with torch.randint in the range the entry indexes), and a None default kept None."""

from __future__ import annotations

from pathlib import Path

import torch
import upstreamkit

from kernelsmith.harness.handoff import SameFile
from kernelsmith.harness.new import _arguments, entry_function, skeleton, write_skeleton
from kernelsmith.onboard.config import load_target
from kernelsmith.pysource import parse

LIGER_YAML = Path(__file__).resolve().parents[2] / "targets" / "liger.yaml"

# Attention over [batch, heads, seq, head_dim] as a launcher reads it: q unpacked, k and v only
# through strides and one dimension; x flattened to rows of D after its shape is read.
ATTENTION = '''
import torch


def attention_forward(q, k, v, x, scale: float = None, bias: "Optional[torch.Tensor]" = None):
    B, H, S, D = q.shape
    q = q.contiguous()
    strides = (k.stride(0), k.stride(1), k.stride(2), k.stride(3), v.stride(3))
    assert v.shape[3] == D
    rows = x.view(-1, D)
    x = x.view(-1)
    n_rows, n_all = x.shape[0], 0
    if scale is None:
        scale = D ** -0.5
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    return torch.softmax(s, -1) @ v.float() + rows.sum()
'''

# Routing as an MoE layer reads it: indices handed on with the size they index, a gather by an
# index tensor, a bool mask, an integer tensor whose range nothing says.
ROUTING = '''
import torch


def count(ids, n):
    return torch.bincount(ids.long().flatten(), minlength=n)


def route(x, w, expert_ids, token_index, keep, sel, weights, valid_mask):
    T, K = expert_ids.shape
    E, N, Hd = w.shape
    counts = count(expert_ids, E)
    picked = x[token_index.long()]
    picked = torch.where(keep[:, :], picked.sum(-1), 0.0)
    chosen = sel.to(torch.int32)
    return counts, picked, chosen, weights[valid_mask].sum()
'''


def _text(source: str, entry: str) -> str:
    fn = entry_function(source, entry, "f.py")
    return skeleton("o/r", "f.py", entry, _arguments(fn, entry), fn, SameFile(parse(source)))


def _harness(text: str) -> dict:
    ns: dict = {}
    exec(compile(text, "skeleton.py", "exec"), ns)
    return ns


def _entry(source: str, name: str):
    ns: dict = {}
    exec(compile(source, "kernel.py", "exec"), ns)
    return ns[name]


def test_rank_and_dimension_names_come_from_how_the_code_uses_each_tensor():
    text = _text(ATTENTION, "attention_forward")
    h = _harness(text)
    shape = h["CPU_SHAPES"][1]
    assert {"B", "H", "S", "D"} <= set(shape) and "q_rows" not in shape
    inputs = h["make_inputs"](shape, "cpu", 0)
    assert inputs["q"].shape == (shape["B"], shape["H"], shape["S"], shape["D"])
    assert inputs["k"].dim() == 4 and inputs["v"].dim() == 4      # k.stride(3), v.shape[3]
    # x.view(-1, D) names x's last dimension, not its rank: two dimensions, the last one D.
    assert inputs["x"].shape == (shape["x_rows"], shape["D"])
    assert "# x: [x_rows, D] (TODO: nothing in the entry says its rank)" in text
    assert "# q: [B, H, S, D]" in text


def test_a_none_default_stays_none():
    text = _text(ATTENTION, "attention_forward")
    assert '"scale": None,  # None: the entry\'s default' in text and '"bias": None,' in text
    h = _harness(text)
    shape = dict(h["CPU_SHAPES"][1])
    for f in ("k", "v"):  # dimensions the code leaves unnamed, here as q's
        shape.update({f"{f}_dim{i}": shape[d] for i, d in enumerate("BHSD")})
    inputs = h["make_inputs"](shape, "cpu", 0)
    assert inputs["scale"] is None and inputs["bias"] is None
    out = _entry(ATTENTION, "attention_forward")(**inputs)
    assert out.shape == inputs["q"].shape


def test_integer_and_bool_tensors_are_made_in_the_range_the_entry_indexes():
    text = _text(ROUTING, "route")
    h = _harness(text)
    shape = h["CPU_SHAPES"][1]
    inputs = h["make_inputs"](shape, "cpu", 3)
    ids, token_index, keep, sel = (inputs[n] for n in ("expert_ids", "token_index", "keep", "sel"))
    assert ids.dtype == torch.int64 and ids.shape == (shape["T"], shape["K"])   # .long() in count
    assert 0 <= ids.min() and ids.max() < shape["E"]                  # passed on with E
    assert "values in [0, E): the entry passes it with E to count" in text
    assert token_index.dtype == torch.int32 and token_index.max() < inputs["x"].shape[0]   # x[token_index]
    assert "values in [0, x_rows): it indexes x" in text
    assert keep.dtype == torch.bool                                    # torch.where's condition
    assert inputs["valid_mask"].dtype == torch.bool                   # weights[valid_mask] selects
    assert sel.dtype == torch.int32 and "sel_high" in shape            # .to(torch.int32), range unknown
    assert "TODO: nothing in the entry says what its values index; sel_high bounds them" in text
    assert inputs["x"].is_floating_point() and inputs["weights"].is_floating_point()
    shape = dict(shape, keep_rows=shape["token_index_rows"], keep_cols=shape["token_index_cols"],
                 valid_mask_rows=shape["weights_rows"], valid_mask_cols=shape["weights_cols"])
    counts, picked, *_ = _entry(ROUTING, "route")(**h["make_inputs"](shape, "cpu", 3))
    assert counts.shape == (shape["E"],) and picked.shape[0] == shape["token_index_rows"]


def _liger_skeleton(tmp_path, op: str) -> str:
    root = upstreamkit.require("liger")
    yaml = LIGER_YAML.read_text().replace("harness: liger/", f"harness: {tmp_path}/")
    (tmp_path / "liger.yaml").write_text(yaml)
    return write_skeleton(load_target(tmp_path / "liger.yaml"), op, root).read_text()


def test_liger_neighborhood_attention_and_moe_skeletons(tmp_path):
    nat = _harness(_liger_skeleton(tmp_path, "fused_neighborhood_attention"))
    shape = nat["CPU_SHAPES"][1]
    inputs = nat["make_inputs"](shape, "cpu", 0)
    dims = (shape["batch_size"], shape["num_heads"], shape["seq_len"], shape["head_dim"])
    assert all(inputs[n].shape == dims for n in ("query", "key", "value"))   # as the docstring says
    assert inputs["scale"] is None and inputs["kernel_size"] == shape["kernel_size"]
    moe_text = _liger_skeleton(tmp_path, "fused_moe")
    moe = _harness(moe_text)
    shape = moe["CPU_SHAPES"][1]
    inputs = moe["make_inputs"](shape, "cpu", 0)
    index = inputs["top_k_index"]
    assert index.dtype == torch.int32 and index.shape == (shape["T"], shape["K"])
    assert index.max() < shape["E"] == inputs["gate_up_proj"].shape[0] == inputs["down_proj"].shape[0]
    assert inputs["x"].shape == (shape["T"], shape["H"]) and inputs["top_k_weights"].is_floating_point()


KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def _gather_kernel(x_ptr, rows_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(rows_ptr + pid)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)
    tl.store(out_ptr + pid * n_cols + cols, v, mask=cols < n_cols)
'''

GATHER = '''
import torch
import triton

from pkg.kernels import _gather_kernel


def _launch(x, rows, out):
    _gather_kernel[(rows.numel(),)](x, rows, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))


def gather_rows(x, rows):
    out = torch.empty(rows.numel(), x.shape[1], dtype=x.dtype, device=x.device)
    _launch(x, rows, out)
    return out
'''


def test_a_kernel_that_offsets_pointers_by_loaded_values_makes_an_integer_tensor(tmp_path):
    from kernelsmith.launch.follow import HelperReach, Sources

    # In the same file, and behind a helper in a module of the checkout the file imports.
    same = _text(KERNELS + GATHER.replace("from pkg.kernels import _gather_kernel", ""), "gather_rows")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernels.py").write_text(KERNELS)
    fn = entry_function(GATHER, "gather_rows", "ops.py")
    reach = HelperReach(Sources(tmp_path, "pkg/ops.py"), GATHER, parse(GATHER))
    imported = skeleton("o/r", "pkg/ops.py", "gather_rows", _arguments(fn), fn, reach)
    for text in (same, imported):
        assert "kernel _gather_kernel offsets pointers by its values (line 11) (in _launch)" in text
        h = _harness(text)
        inputs = h["make_inputs"](h["CPU_SHAPES"][0], "cpu", 0)
        assert inputs["rows"].dtype == torch.int32 and inputs["x"].dtype == torch.float16
        assert "TODO: nothing in the entry says what its values index; rows_high bounds them" in text
    plain = skeleton("o/r", "pkg/ops.py", "gather_rows", _arguments(fn), fn)   # no reach: nothing followed
    assert "rows = torch.randn(" in plain
