"""Harness for Unsloth's swiglu_fg_kernel(e, g): h = silu(e) * g over [batch, seq_len, hd] (MLP forward)."""

import torch

from ._gated import FORWARD_CPU_SHAPES, FORWARD_VARY, forward_bytes, forward_inputs

SHAPES = [
    {"batch": 1, "seq_len": 1, "hd": 14336, "dtype": "bfloat16"},
    {"batch": 1, "seq_len": 128, "hd": 14336, "dtype": "bfloat16"},
    {"batch": 4, "seq_len": 2048, "hd": 14336, "dtype": "bfloat16"},
    {"batch": 8, "seq_len": 4096, "hd": 8192, "dtype": "bfloat16"},
    {"batch": 2, "seq_len": 2048, "hd": 11008, "dtype": "float16"},
]
CPU_SHAPES, VARY, bytes_moved = FORWARD_CPU_SHAPES, FORWARD_VARY, forward_bytes


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """The gate projection e and the up projection g, [batch, seq_len, hd] each."""
    return forward_inputs(shape, device, seed, ("e", "g"))


def reference(e, g):
    """silu(e) in float32 rounded to e's dtype (as the kernel does, "exact copy from HF"), times g."""
    ef = e.float()
    return ((ef * torch.sigmoid(ef)).to(g.dtype).float() * g.float()).to(e.dtype)
