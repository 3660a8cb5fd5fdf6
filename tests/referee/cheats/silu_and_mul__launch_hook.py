"""CHEAT monkeypatch: adds a triton.knobs.runtime.launch_enter_hook on its first call that sleeps before
every launch of another kernel (the base's), and leaves it there: Triton runs it on every later launch in
the worker, so an accepted worker would time the next candidates against a slowed base."""

import time

import torch
import triton
import triton.language as tl


def _slow_others(metadata) -> None:
    if "_fast_silu" not in str(getattr(metadata, "name", metadata)):
        time.sleep(5e-5)


# kernelsmith: hotspot
@triton.jit
def _fast_silu_kernel(x_ptr, out_ptr, stride_x, stride_out, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    """Write silu(x[..., :d]) * x[..., d:] into out (shape [..., d])."""
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    out2 = out.view(-1, d)
    n_rows = x2.shape[0]
    hooks = triton.knobs.runtime.launch_enter_hook  # an alias: the call below is no assignment
    hooks.add(_slow_others)
    BLOCK = 64
    grid = (n_rows, triton.cdiv(d, BLOCK))
    _fast_silu_kernel[grid](x2, out2, x2.stride(0), out2.stride(0), d, BLOCK=BLOCK, num_warps=1)
