"""Harness for Liger-Kernel's rope_forward(q, k, cos, sin): rotary embedding, in place.

As Hugging Face models call it: q [batch, heads_q, seq, head_dim] and k [batch, heads_k, seq,
head_dim] are transposed views of the projections' [batch, seq, heads, head_dim] output, so the
kernel's `q.transpose(1, 2).contiguous()` copies nothing and it rotates q and k in place (OUTPUTS
and INPLACE name them; what it returns, views of them and cos/sin, is not compared). cos/sin
[batch, seq, head_dim] hold each token's angles twice (rotate-half layout). The kernel's block
sizes are next powers of two of the head counts and head dim, computed in the entry.
"""

import torch

SHAPES = [
    {"batch": 1, "seq": 4096, "heads_q": 32, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 8, "seq": 1024, "heads_q": 32, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 64, "seq": 1, "heads_q": 32, "heads_k": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 2, "seq": 2048, "heads_q": 40, "heads_k": 40, "head_dim": 128, "dtype": "float16"},
    {"batch": 4, "seq": 2048, "heads_q": 14, "heads_k": 2, "head_dim": 64, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"batch": 1, "seq": 3, "heads_q": 4, "heads_k": 2, "head_dim": 32, "dtype": "float16"},
    {"batch": 2, "seq": 2, "heads_q": 3, "heads_k": 3, "head_dim": 16, "dtype": "float32"},
]
OUTPUTS = ["q", "k"]
INPLACE = ["q", "k"]
# The kernel multiplies in the input dtype, rounding each product: against a float32 reference a
# bf16 output may be off by two roundings of |q * cos| (up to ~6 * 2**-8), hence the wider atol.
TOLERANCE = {"bfloat16": {"atol": 5e-2, "rtol": 1e-2}}
VARY = {"seq": [1, 5, 17], "heads_q": [2, 6, 12], "head_dim": [16, 64]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """q, k as transposed views of [batch, seq, heads, dim]; cos/sin of random positions."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    b, s, d = shape["batch"], shape["seq"], shape["head_dim"]
    q = torch.randn(b, s, shape["heads_q"], d, generator=g, device=device).to(dtype)
    k = torch.randn(b, s, shape["heads_k"], d, generator=g, device=device).to(dtype)
    start = torch.randint(0, 32768, (b, 1), generator=g, device=device)
    pos = (start + torch.arange(s, device=device)).double()
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=device).double() / d))
    angles = torch.cat([pos[..., None] * inv_freq] * 2, dim=-1)
    return {"q": q.transpose(1, 2), "k": k.transpose(1, 2),
            "cos": angles.cos().to(dtype), "sin": angles.sin().to(dtype)}


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    xf = x.float()
    rot = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos.float()[:, None] + rot * sin.float()[:, None]).to(x.dtype)


def reference(q, k, cos, sin):
    """x * cos + rotate_half(x) * sin in float32, cast to the input dtype, for q and k."""
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def bytes_moved(shape: dict) -> int:
    """Read and write q and k once; read the first half of cos and sin (the kernel needs no more)."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    b, s, d = shape["batch"], shape["seq"], shape["head_dim"]
    return size * (2 * b * s * (shape["heads_q"] + shape["heads_k"]) * d + b * s * d)
