"""`harness new` maps scalars to constants or shape fields (issue 41, item 7): floats, ints,
bools, strings and enums (from annotations, defaults, the body and names) never become tensors
with `_rows`/`_cols` fields; tensors only where the signature, the defaults or the body say so."""

from __future__ import annotations

import re

import torch

from kernelsmith.harness.args import classify
from kernelsmith.harness.new import _arguments, entry_function, skeleton

# As a Liger-style forward helper reads: no annotations, the scalars beside the tensors.
SOURCE = '''
import torch
from enum import Enum
from typing import Literal


class CastingMode(Enum):
    LLAMA = 0
    GEMMA = 1


_modes = {"llama": CastingMode.LLAMA, "gemma": CastingMode.GEMMA}


def rms_norm_forward(X, W, eps, offset, casting_mode, in_place=True, n_cols: int = 16,
                     layout: Literal["rows", "cols"] = "rows", mode=CastingMode.LLAMA, bias=None,
                     scale: float = 0.5, dtype: torch.dtype = torch.float32, *, block_size=64):
    shape = X.shape
    X = X.view(-1, shape[-1])
    if casting_mode not in ("llama", "gemma"):
        raise ValueError(casting_mode)
    if bias is not None:
        X = X + bias.view(1, -1)
    y = (X.float() * torch.rsqrt(X.float().pow(2).mean(-1, keepdim=True) + eps)) * (offset + W.float())
    assert isinstance(mode, CastingMode) and isinstance(in_place, bool) and n_cols > 0
    return (y * scale).to(dtype)
'''


def _kinds(source: str, entry: str) -> dict[str, str]:
    fn = entry_function(source, entry, "f.py")
    return {a.name: a.kind for a in classify(fn, _arguments(fn))}


def test_scalars_are_constants_or_shape_fields_and_tensors_are_tensors():
    kinds = _kinds(SOURCE, "rms_norm_forward")
    assert kinds == {"X": "tensor", "W": "tensor", "eps": "float", "offset": "float", "casting_mode": "str",
                     "in_place": "bool", "n_cols": "size", "layout": "str", "mode": "default", "bias": "none",
                     "scale": "float", "dtype": "dtype", "block_size": "int"}


def test_the_skeleton_makes_inputs_the_entry_takes():
    fn = entry_function(SOURCE, "rms_norm_forward", "f.py")
    text = skeleton("o/r", "f.py", "rms_norm_forward", _arguments(fn), fn)
    for scalar in ("eps", "offset", "casting_mode", "in_place", "n_cols", "scale", "mode", "block_size"):
        assert not re.search(rf'"{scalar}_(rows|cols)"', text), scalar
    assert '"X_rows"' in text and '"W_cols"' in text and '"n_cols": shape["n_cols"]' in text
    assert '"casting_mode": "llama"' in text   # a value the entry compares with, so it accepts it
    assert "mode=None" in text and "CastingMode.LLAMA" in text   # left at the entry's default
    harness: dict = {}
    exec(compile(text, "skeleton.py", "exec"), harness)
    entry_ns: dict = {}
    exec(compile(SOURCE, "kernel.py", "exec"), entry_ns)
    shape = dict(harness["CPU_SHAPES"][1], W_rows=1)   # a weight row; the rest as written
    shape["W_cols"] = shape["X_cols"]
    inputs = harness["make_inputs"](shape, "cpu", 0)
    assert isinstance(inputs["eps"], float) and isinstance(inputs["in_place"], bool)
    assert isinstance(inputs["n_cols"], int) and inputs["dtype"] is torch.float32
    assert "mode" not in inputs and inputs["bias"] is None
    out = entry_ns["rms_norm_forward"](**inputs)
    assert out.shape == inputs["X"].shape


def test_annotations_and_defaults_decide_before_names():
    src = ("import torch\n"
           "def f(x: torch.Tensor, eps: torch.Tensor, n: int, flag: bool, name: str, k: float = 2,\n"
           "      p: 'Optional[float]' = None, w=None):\n"
           "    return x * eps + w.sum()\n")
    kinds = _kinds(src, "f")
    assert kinds["eps"] == "tensor"          # annotated a tensor, whatever its name
    assert kinds["n"] == "size" and kinds["flag"] == "bool" and kinds["name"] == "str"
    assert kinds["k"] == "int" and kinds["w"] == "none"
    assert kinds["p"] == "none"   # a None default stays None: the entry picks its own value
