"""Harness for Liger-Kernel's LayerNorm as models call it: LigerLayerNormFunction.apply(X, W, B, eps).

The entry is the autograd Function's `apply` (`entry: LigerLayerNormFunction.apply`): kernelsmith
binds the inputs to `forward(ctx, X, W, B, eps)`, which calls layer_norm_forward and returns Y
only. The kernel calls libdevice's rsqrt and `eps.to(tl.float32)` on its float argument, neither
of which the Triton interpreter runs as compiled Triton does (kernelsmith's interpreter backend
stands in for both). BLOCK_SIZE and num_warps come from `calculate_settings(n_cols)`.
"""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 2048, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 768, "dtype": "float16"},  # a BERT/ViT-sized row
    {"tokens": 8192, "hidden": 1024, "dtype": "float32"},
]
CPU_SHAPES = [
    {"tokens": 3, "hidden": 256, "dtype": "float16"},
    {"tokens": 2, "hidden": 96, "dtype": "float32"},
]
OUTPUTS = None  # the one tensor apply returns
VARY = {"tokens": [1, 7, 33], "hidden": [96, 1000, 2048]}
EPS = 1e-5


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """X [tokens, hidden] (off-centre, so the mean matters), W around 1, B around 0; eps 1e-5."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, h = shape["tokens"], shape["hidden"]
    x = (0.5 + torch.randn(t, h, generator=g, device=device)).to(dtype)
    w = (1.0 + 0.1 * torch.randn(h, generator=g, device=device)).to(dtype)
    b = (0.1 * torch.randn(h, generator=g, device=device)).to(dtype)
    return {"X": x, "W": w, "B": b, "eps": EPS}


def reference(X, W, B, eps):
    """LayerNorm over the last dimension in float32, rounded once to the input dtype."""
    y = torch.nn.functional.layer_norm(X.float(), (X.shape[-1],), W.float(), B.float(), eps)
    return y.to(X.dtype)


def bytes_moved(shape: dict) -> int:
    """Read X, W and B, write Y and the float32 mean and rstd of every row."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    t, h = shape["tokens"], shape["hidden"]
    return size * (2 * t * h + 2 * h) + 8 * t
