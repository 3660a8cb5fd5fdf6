"""Harness for LMDeploy's rms_norm(hidden_states, weight, eps, out=...) (no residual)."""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 256, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 8192, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 7168, "dtype": "float16"},
]
# The kernel file needs a CUDA device (its .utils queries the driver): these check the harness.
CPU_SHAPES = [
    {"tokens": 3, "hidden": 256, "dtype": "float16"},
    {"tokens": 2, "hidden": 96, "dtype": "float32"},
]
OUTPUTS = ["out"]
VARY = {"tokens": [1, 7, 333, 5000], "hidden": [96, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """hidden_states [tokens, hidden], weight [hidden], an output buffer; eps 1e-6."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, h = shape["tokens"], shape["hidden"]
    x = torch.randn(t, h, generator=g, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(h, generator=g, device=device)).to(dtype)
    out = torch.empty(t, h, device=device, dtype=dtype)
    return {"hidden_states": x, "weight": w, "eps": 1e-6, "out": out}


def reference(hidden_states, weight, eps, out):
    """RMSNorm in float32 (mean of squares, rsqrt, times weight), cast once to the input dtype."""
    xf = hidden_states.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(hidden_states.dtype)


def bytes_moved(shape: dict) -> int:
    """Read x and weight once, write the output once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * (2 * shape["tokens"] * shape["hidden"] + shape["hidden"])
