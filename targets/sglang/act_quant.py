"""Harness for SGLang's act_quant(x, block_size=128): per-(row, 128-column group) FP8 e4m3 quantization.

Returns (y float8_e4m3fn, scales float32 [tokens, hidden / block_size]). The kernel computes
scale = max(amax, 1e-4) * (1 / 448) and y = clamp(x / scale, -448, 448) in float32, then rounds to
fp8 (round to nearest even, as the GPU's cvt.rn.satfinite does); the reference does the same in
torch. Under the interpreter this needs kernelsmith's fp8 cast stand-in: triton 3.9's own
interpreter cast drops the mantissa carry (31.5 becomes 16.0).
"""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 7168, "dtype": "bfloat16"},
    {"tokens": 128, "hidden": 7168, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 7168, "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 2048, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"tokens": 5, "hidden": 256, "dtype": "float32"},
    {"tokens": 3, "hidden": 128, "dtype": "float16"},
]
OUTPUTS = None
VARY = {"tokens": [1, 7, 333, 5000], "hidden": [128, 1024, 7168]}
BLOCK = 128


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x [tokens, hidden] with a spread of magnitudes per group, and the block size."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = 3.0 * torch.randn(shape["tokens"], shape["hidden"], generator=g, device=device)
    return {"x": x.to(dtype), "block_size": BLOCK}


def reference(x, block_size):
    """(y, scales) computed as the kernel rounds, in float32 torch."""
    xf = x.float().reshape(x.shape[0], -1, block_size)
    amax = xf.abs().amax(-1).clamp(min=1e-4)
    scale = amax * (1.0 / 448.0)
    y = (xf / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return y.reshape(x.shape), scale


def bytes_moved(shape: dict) -> int:
    """Read x once, write one byte per element and one float32 scale per group."""
    n = shape["tokens"] * shape["hidden"]
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * n + n + 4 * (n // BLOCK)
