"""Harness for LMDeploy's silu_and_mul(gate_up, out=...): silu(gate) * up of a [M, 2N] input."""

import torch

SHAPES = [
    {"tokens": 1, "inter": 14336, "dtype": "bfloat16"},
    {"tokens": 128, "inter": 14336, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 14336, "dtype": "bfloat16"},
    {"tokens": 16384, "inter": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 11008, "dtype": "float16"},
]
# The kernel file needs a CUDA device (its .utils queries the driver): these check the harness.
CPU_SHAPES = [
    {"tokens": 3, "inter": 256, "dtype": "float16"},
    {"tokens": 2, "inter": 96, "dtype": "float32"},
]
OUTPUTS = ["out"]
VARY = {"tokens": [1, 7, 333, 5000], "inter": [96, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """gate_up [tokens, 2*inter] (gate first) and an output buffer [tokens, inter]."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, n = shape["tokens"], shape["inter"]
    gate_up = (2.0 * torch.randn(t, 2 * n, generator=g, device=device)).to(dtype)
    return {"gate_up": gate_up, "out": torch.empty(t, n, device=device, dtype=dtype)}


def reference(gate_up, out):
    """silu(gate) in float32 rounded to the input dtype, times up (LMDeploy's rounding order)."""
    n = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :n].float(), gate_up[:, n:].float()
    act = (gate * torch.sigmoid(gate)).to(gate_up.dtype).float()
    return (act * up).to(gate_up.dtype)


def bytes_moved(shape: dict) -> int:
    """Read gate and up once, write the output once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * 3 * shape["tokens"] * shape["inter"]
