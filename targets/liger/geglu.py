"""Harness for Liger-Kernel's GEGLU as models call it: LigerGELUMulFunction.apply(a, b).

The entry is the autograd Function's `apply` (the yaml says `entry: LigerGELUMulFunction.apply`):
kernelsmith binds the inputs to `forward(ctx, a, b)`. It returns c = gelu_tanh(a) * b; the kernel
calls libdevice's tanh, which the Triton interpreter lacks (kernelsmith's interpreter backend
stands in for it). BLOCK_SIZE and num_warps come from `calculate_settings(n_cols)`.
"""

import torch

SHAPES = [
    {"tokens": 1, "inter": 16384, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 16384, "dtype": "bfloat16"},  # Gemma-7B MLP
    {"tokens": 16384, "inter": 9216, "dtype": "bfloat16"},  # Gemma-2-2B MLP
    {"tokens": 4096, "inter": 11008, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "inter": 256, "dtype": "float16"},
    {"tokens": 2, "inter": 96, "dtype": "float32"},
]
OUTPUTS = None  # the one tensor apply returns
VARY = {"tokens": [1, 7, 33], "inter": [96, 1000, 2048]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """a (the gate) and b (the up projection), [tokens, inter]."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, n = shape["tokens"], shape["inter"]
    a = (2.0 * torch.randn(t, n, generator=g, device=device)).to(dtype)
    b = torch.randn(t, n, generator=g, device=device).to(dtype)
    return {"a": a, "b": b}


def reference(a, b):
    """gelu (tanh approximation) of a in float32, rounded to the input dtype, times b."""
    act = torch.nn.functional.gelu(a.float(), approximate="tanh").to(a.dtype)
    return (act.float() * b.float()).to(a.dtype)


def bytes_moved(shape: dict) -> int:
    """Read a and b, write c."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * 3 * shape["tokens"] * shape["inter"]
