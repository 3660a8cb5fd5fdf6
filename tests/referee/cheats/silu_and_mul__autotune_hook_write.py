"""CHEAT file_access: an autotune config's pre_hook writes the inputs to disk (pathlib, no open())."""

import pathlib
import tempfile

import torch
import triton
import triton.language as tl


def _stash(nargs):
    # Runs inside Triton's launch machinery (Autotuner.run), before the kernel starts.
    x = nargs["x_ptr"]
    pathlib.Path(tempfile.gettempdir(), "kernelsmith-silu-stash.txt").write_text(f"{tuple(x.shape)} {x.sum().item()}")


# kernelsmith: hotspot
@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=1, pre_hook=_stash)], key=["d"])
@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, d, BLOCK: tl.constexpr):
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
    grid = (x2.shape[0], triton.cdiv(d, 64))
    _silu_and_mul_kernel[grid](x2, out2, x2.stride(0), out2.stride(0), d)
