"""Harness for LMDeploy's apply_rotary_pos_emb(q, k, cos, sin, q_embed, k_embed) (rotate-half)."""

import torch

SHAPES = [
    {"tokens": 1, "heads_q": 32, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 256, "heads_q": 32, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 4096, "heads_q": 32, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 16384, "heads_q": 64, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 4096, "heads_q": 40, "heads_k": 40, "head_dim": 128, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "heads_q": 4, "heads_k": 2, "head_dim": 32, "dtype": "float16"},
    {"tokens": 5, "heads_q": 2, "heads_k": 2, "head_dim": 16, "dtype": "float32"},
]
OUTPUTS = ["q_embed", "k_embed"]
# The kernel rounds each product to the input dtype (no FMA): against a float32 reference a bf16
# output may be off by two roundings of |q * cos| (up to ~6 * 2**-8), hence the wider bf16 atol.
TOLERANCE = {"bfloat16": {"atol": 5e-2, "rtol": 1e-2}}
VARY = {"tokens": [1, 7, 333, 5000], "heads_q": [2, 12, 32], "head_dim": [64, 128]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """q, k [tokens, heads, dim]; cos/sin [tokens, dim] of random positions; output buffers."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, d = shape["tokens"], shape["head_dim"]
    q = torch.randn(t, shape["heads_q"], d, generator=g, device=device)
    k = torch.randn(t, shape["heads_k"], d, generator=g, device=device)
    pos = torch.randint(0, 32768, (t,), generator=g, device=device).double()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=device).double() / d))
    angles = torch.cat([pos[:, None] * inv_freq[None, :]] * 2, dim=-1)
    to = dict(device=device, dtype=dtype)
    return {
        "q": q.to(**to), "k": k.to(**to),
        "cos": angles.cos().to(**to), "sin": angles.sin().to(**to),
        "q_embed": torch.empty(t, shape["heads_q"], d, **to),
        "k_embed": torch.empty(t, shape["heads_k"], d, **to),
    }


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    xf = x.float()
    rot = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos.float()[:, None, :] + rot * sin.float()[:, None, :]).to(x.dtype)


def reference(q, k, cos, sin, q_embed, k_embed):
    """x * cos + rotate_half(x) * sin in float32, cast to the input dtype, for q and k."""
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def bytes_moved(shape: dict) -> int:
    """Read q, k, cos and sin once, write q_embed and k_embed once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    heads = shape["heads_q"] + shape["heads_k"]
    return size * shape["tokens"] * shape["head_dim"] * (2 * heads + 2)
