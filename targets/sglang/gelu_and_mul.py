"""Harness for SGLang's gelu_and_mul_triton(hidden_states, out=...): gelu(x[:, :d]) * x[:, d:]."""

import math

import torch

SHAPES = [
    {"tokens": 1, "inter": 16384, "dtype": "bfloat16"},
    {"tokens": 128, "inter": 16384, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 16384, "dtype": "bfloat16"},
    {"tokens": 16384, "inter": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 8192, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "inter": 256, "dtype": "float16"},
    {"tokens": 2, "inter": 96, "dtype": "float32"},
]
OUTPUTS = ["out"]
VARY = {"tokens": [1, 7, 333, 5000], "inter": [96, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """hidden_states [tokens, 2*inter] (gelu half first) and an output buffer [tokens, inter]."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, n = shape["tokens"], shape["inter"]
    h = (2.0 * torch.randn(t, 2 * n, generator=g, device=device)).to(dtype)
    return {"hidden_states": h, "out": torch.empty(t, n, device=device, dtype=dtype)}


def reference(hidden_states, out):
    """Exact (erf) gelu in float32, rounded to the input dtype, times the second half."""
    n = hidden_states.shape[-1] // 2
    x1, x3 = hidden_states[:, :n].float(), hidden_states[:, n:].float()
    gelu = 0.5 * (1.0 + torch.erf(x1 / math.sqrt(2.0))) * x1
    return (x3 * gelu.to(hidden_states.dtype).float()).to(hidden_states.dtype)


def bytes_moved(shape: dict) -> int:
    """Read both halves once, write the output once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * 3 * shape["tokens"] * shape["inter"]
