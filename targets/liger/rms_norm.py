"""Harness for Liger-Kernel's rms_norm_forward(X, W, eps, offset, casting_mode, row_mode).

It returns (Y, X, RSTD, BLOCK_SIZE, num_warps, casting_mode): Y and the per-row inverse RMS
(float32 in the llama and gemma modes) are compared, OUTPUTS names their positions; X is the input
reshaped and the rest are ints. BLOCK_SIZE and num_warps come from `calculate_settings(n_cols)`
(liger_kernel/ops/utils.py). Rows of up to 256 columns with at least 32768 rows take the
16-rows-per-program kernel (`_block_rms_norm_forward_kernel`), the others one row per program.
"""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 4096, "mode": "llama", "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 4096, "mode": "llama", "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 8192, "mode": "llama", "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 3072, "mode": "gemma", "dtype": "bfloat16"},  # Gemma: offset 1, all fp32
    {"tokens": 65536, "hidden": 128, "mode": "llama", "dtype": "bfloat16"},  # q/k norm: the block kernel
    {"tokens": 4096, "hidden": 5120, "mode": "llama", "dtype": "float16"},
]
# The interpreter runs one program at a time: a few rows. The block kernel needs 32768 rows (GPU).
CPU_SHAPES = [
    {"tokens": 3, "hidden": 256, "mode": "llama", "dtype": "float16"},
    {"tokens": 2, "hidden": 96, "mode": "gemma", "dtype": "float32"},
]
OUTPUTS = (0, 2)  # Y and RSTD of (Y, X, RSTD, BLOCK_SIZE, num_warps, casting_mode)
VARY = {"tokens": [1, 7, 33], "hidden": [96, 1000, 2048]}
EPS = 1e-6


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """X [tokens, hidden], W [hidden] around 1 (around 0 for Gemma, whose weight is W + 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, h = shape["tokens"], shape["hidden"]
    gemma = shape["mode"] == "gemma"
    x = torch.randn(t, h, generator=g, device=device).to(dtype)
    w = ((0.0 if gemma else 1.0) + 0.1 * torch.randn(h, generator=g, device=device)).to(dtype)
    return {"X": x, "W": w, "eps": EPS, "offset": 1.0 if gemma else 0.0, "casting_mode": shape["mode"],
            "row_mode": None}


def reference(X, W, eps, offset, casting_mode, row_mode):
    """(Y, RSTD): rstd = 1/sqrt(mean(x^2) + eps) in float32. Llama rounds x * rstd to the input
    dtype before the weight multiply; Gemma rounds only the result."""
    xf = X.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
    normed = xf * rstd[:, None]
    if casting_mode == "llama":
        normed = normed.to(X.dtype).float()
    y = normed * (offset + W.float())
    return y.to(X.dtype), rstd


def bytes_moved(shape: dict) -> int:
    """Read X and W, write Y and one float32 RSTD per row."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    t, h = shape["tokens"], shape["hidden"]
    return size * (2 * t * h + h) + 4 * t
