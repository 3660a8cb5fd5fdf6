"""Harness for Unsloth's geglu_approx_forward_kernel(gate, up): h = gelu_tanh(gate) * up (the tanh
approximation, through libdevice's tanh) over [batch, seq_len, hd] (MLP forward)."""

import math

import torch

from ._gated import FORWARD_CPU_SHAPES, FORWARD_VARY, GEGLU_FORWARD_SHAPES, forward_bytes, gelu_forward_inputs

SHAPES = GEGLU_FORWARD_SHAPES
CPU_SHAPES, VARY, bytes_moved = FORWARD_CPU_SHAPES, FORWARD_VARY, forward_bytes

make_inputs = gelu_forward_inputs  # the gate and up projections, [batch, seq_len, hd] each


def reference(gate, up):
    """Tanh-approximated gelu in float32 rounded to the dtype, as the kernel does, times up."""
    x = gate.float()
    inner = math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)
    f = (0.5 * x * (torch.tanh(inner) + 1.0)).to(up.dtype)
    return (f.float() * up.float()).to(gate.dtype)
