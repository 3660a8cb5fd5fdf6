"""Harness for miniserve's silu_and_mul(out, x): writes silu(x[:, :d]) * x[:, d:] into out."""

import torch

SHAPES = [
    {"tokens": 1, "d": 11008, "dtype": "bfloat16"},
    {"tokens": 256, "d": 14336, "dtype": "bfloat16"},
    {"tokens": 4096, "d": 11008, "dtype": "bfloat16"},
    {"tokens": 8192, "d": 14336, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "d": 200, "dtype": "float16"},
    {"tokens": 2, "d": 64, "dtype": "float32"},
]
OUTPUTS = ["out"]
VARY = {"tokens": [1, 3, 17], "d": [32, 100, 256, 333]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x [tokens, 2d] random normal and an output buffer out [tokens, d]."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = (2 * torch.randn(shape["tokens"], 2 * shape["d"], generator=g, device=device)).to(dtype)
    out = torch.empty(shape["tokens"], shape["d"], device=device, dtype=dtype)
    return {"out": out, "x": x}


def reference(out, x):
    """silu(gate) * up in float32, cast to out's dtype."""
    d = x.shape[-1] // 2
    xf = x.float()
    return (torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]).to(out.dtype)


def bytes_moved(shape: dict) -> int:
    """Read x (2d per token) once, write out (d per token) once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * 3 * shape["tokens"] * shape["d"]
