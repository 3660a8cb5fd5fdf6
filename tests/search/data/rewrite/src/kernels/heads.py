"""A 2-D grid over tokens x heads: each head's row scaled by a per-(token, head) gate, heads major
in the grid (axis 0) as LMDeploy's rotary kernel orders them, and the head count read back from the
grid."""

import torch
import triton
import triton.language as tl


@triton.jit
def _head_scale_kernel(x_ptr, gate_ptr, out_ptr, stride_t, stride_h, head_dim, BLOCK_D: tl.constexpr):
    head = tl.program_id(0)
    n_heads = tl.num_programs(0)
    token = tl.program_id(1)
    g = tl.load(gate_ptr + token * n_heads + head).to(tl.float32)
    g = 0.0 if g < 0 else g  # negative gates close the head
    d = tl.arange(0, BLOCK_D)
    mask = d < head_dim
    x = tl.load(x_ptr + token * stride_t + head * stride_h + d, mask=mask).to(tl.float32)
    y = (x * g).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + token * stride_t + head * stride_h + d, y, mask=mask)


def head_scale(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """x [tokens, heads, dim] times gate [tokens, heads] clamped at zero."""
    tokens, heads, dim = x.shape
    out = torch.empty_like(x)
    _head_scale_kernel[(heads, tokens)](
        x,
        gate,
        out,
        x.stride(0),
        x.stride(1),
        dim,
        BLOCK_D=triton.next_power_of_2(dim),
    )
    return out
