"""Harness for Unsloth's geglu_approx_forward_kernel(gate, up): h = gelu_tanh(gate) * up (the tanh
approximation, through libdevice's tanh) over [batch, seq_len, hd] (MLP forward)."""

import math

import torch

from ._gated import FORWARD_CPU_SHAPES, FORWARD_VARY, forward_bytes, forward_inputs

SHAPES = [
    {"batch": 1, "seq_len": 1, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 1, "seq_len": 128, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 4, "seq_len": 2048, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 8, "seq_len": 4096, "hd": 9216, "dtype": "bfloat16"},
    {"batch": 2, "seq_len": 2048, "hd": 24576, "dtype": "float16"},
]
CPU_SHAPES, VARY, bytes_moved = FORWARD_CPU_SHAPES, FORWARD_VARY, forward_bytes


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """The gate and up projections, [batch, seq_len, hd] each."""
    return forward_inputs(shape, device, seed, ("gate", "up"))


def reference(gate, up):
    """Tanh-approximated gelu in float32 rounded to the dtype, as the kernel does, times up."""
    x = gate.float()
    inner = math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)
    f = (0.5 * x * (torch.tanh(inner) + 1.0)).to(up.dtype)
    return (f.float() * up.float()).to(gate.dtype)
