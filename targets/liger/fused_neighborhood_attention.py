"""Harness for Liger-Kernel's fused_neighborhood_attention_forward(query, key, value, kernel_size,
dilation, scale, return_lse): attention in which each position sees only its neighbours.

q, k, v are [batch, heads, seq, head_dim]. Four launches: a [seq, seq] float32 mask of the
neighbourhood (|i - j| <= kernel_size // 2 * dilation, every dilation-th), the scores
Q @ K^T * scale with tl.dot in 64 x 64 tiles (stored in the input dtype, -inf outside the
neighbourhood), a row softmax over all seq columns (ops/softmax.py), and attn @ V with tl.dot.
It returns (output, attn_weights, (BLOCK_SIZE, num_warps, multi_block_launch)): the output and the
dense [batch, heads, seq, seq] weights the backward pass reads are compared (OUTPUTS = (0, 1)).
The tile sizes (BLOCK_SIZE_M/N/K) are computed in the entry; `num_stages` and calculate_settings'
`num_warps` go by position into kernel parameters of those names, which the kernels never read
(not launch options: they run with Triton's default warps and stages). tl.dot needs 16 rows: seq >= 16.
"""

import math

import torch

# Dense scores: memory grows with seq^2 (4096 tokens x 32 heads: two 1 GiB buffers in bf16).
SHAPES = [
    {"batch": 2, "heads": 16, "seq": 1024, "head_dim": 64, "kernel_size": 7, "dilation": 1,
     "dtype": "bfloat16"},
    {"batch": 4, "heads": 16, "seq": 2048, "head_dim": 64, "kernel_size": 13, "dilation": 1,
     "dtype": "bfloat16"},
    {"batch": 1, "heads": 32, "seq": 4096, "head_dim": 128, "kernel_size": 7, "dilation": 2,
     "dtype": "bfloat16"},
    # A 56 x 56 feature map flattened (NAT-style vision models): seq not a power of two.
    {"batch": 2, "heads": 12, "seq": 3136, "head_dim": 64, "kernel_size": 9, "dilation": 1,
     "dtype": "float16"},
]
# The interpreter runs one program at a time: upstream's test sizes (seq 24: one 32 x 32 tile).
CPU_SHAPES = [
    {"batch": 1, "heads": 2, "seq": 24, "head_dim": 32, "kernel_size": 7, "dilation": 1, "dtype": "float16"},
    {"batch": 1, "heads": 2, "seq": 20, "head_dim": 16, "kernel_size": 5, "dilation": 2, "dtype": "float32"},
]
OUTPUTS = (0, 1)  # output and attn_weights of (output, attn_weights, softmax_params)
VARY = {"seq": [16, 33, 100], "head_dim": [16, 48, 64]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """q, k, v [batch, heads, seq, head_dim] ~ N(0, 1); the default scale 1/sqrt(head_dim)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    size = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
    q, k, v = (torch.randn(size, generator=g, device=device).to(dtype) for _ in range(3))
    return {"query": q, "key": k, "value": v, "kernel_size": shape["kernel_size"],
            "dilation": shape["dilation"], "scale": None, "return_lse": False}


def neighbourhood(seq: int, kernel_size: int, dilation: int, device) -> torch.Tensor:
    """[seq, seq] bool: key j is in query i's window (the mask upstream's test builds)."""
    i = torch.arange(seq, device=device)[:, None]
    j = torch.arange(seq, device=device)[None, :]
    reach = kernel_size // 2 * dilation
    return ((j - i).abs() <= reach) & ((j - i) % dilation == 0)


def reference(query, key, value, kernel_size, dilation, scale, return_lse):
    """(output, attn_weights) in float32, rounded where the kernel stores: the scores and the
    weights in the input dtype, then each result."""
    dtype = query.dtype
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query.float() @ key.float().transpose(-1, -2) * scale).to(dtype).float()
    mask = neighbourhood(query.shape[2], kernel_size, dilation, query.device)
    attn = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).to(dtype)
    out = attn.float() @ value.float()
    return out.to(dtype), attn


def bytes_moved(shape: dict) -> int:
    """Read q, k, v; write the output and the dense attention weights."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    return size * b * h * (4 * s * d + s * s)


def flops(shape: dict) -> int:
    """Q @ K^T and attn @ V over each window (the work the neighbourhood needs, not the dense one)."""
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    return 2 * 2 * b * h * s * min(shape["kernel_size"], s) * d
