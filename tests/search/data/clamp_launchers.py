"""Launchers written for the launch-signature tests (kernelsmith's own, not copied from any project):
a row scaling whose warp count is clamped from the row length (the pattern of many serving-engine
norms), the same with a knob flowing into a device query the code text cannot tell, and a sampler-like
launcher whose knobs each reach the launch directly."""

import torch
import triton
import triton.language as tl

_on_rocm = torch.version.hip is not None


@triton.jit
def _scale_rows_kernel(out_ptr, x_ptr, w_ptr, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    peak = tl.max(tl.abs(x), axis=0) + 1.0
    tl.store(out_ptr + row * n_cols + cols, x / peak * w, mask=mask)


def scale_rows(x, weight, out=None):
    """x / (max |x| + 1) * weight per row; the warp count grows with the row, clamped."""
    if out is None:
        out = torch.empty_like(x)
    rows, n_cols = x.shape
    most_warps = 8 if _on_rocm else 32
    launch = {
        "BLOCK": triton.next_power_of_2(n_cols),
        "num_warps": max(min(triton.next_power_of_2(triton.cdiv(n_cols, 128)), most_warps), 2),
    }
    _scale_rows_kernel[(rows,)](out, x, weight, n_cols=n_cols, **launch)
    return out


def _warp_budget(device) -> int:
    """Warps the device can hold per program (a device query: nothing the code text can tell)."""
    props = torch.cuda.get_device_properties(device)
    return props.max_threads_per_multi_processor // props.warp_size


def scale_rows_queried(x, weight):
    """scale_rows, with the clamp also bounded by a device query."""
    out = torch.empty_like(x)
    rows, n_cols = x.shape
    num_warps = min(triton.next_power_of_2(triton.cdiv(n_cols, 128)), _warp_budget(x.device))
    num_warps = max(num_warps, 2)
    _scale_rows_kernel[(rows,)](out, x, weight, n_cols=n_cols, BLOCK=triton.next_power_of_2(n_cols),
                                num_warps=num_warps)
    return out


@triton.jit
def _draw_kernel(scores_ptr, idx_ptr, out_ptr, stride_s, stride_i, n_tokens, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_tokens, BLOCK_N):
        offs = start + tl.arange(0, BLOCK_N)
        acc += tl.load(scores_ptr + row * stride_s + offs, mask=offs < n_tokens, other=0.0).to(tl.float32)
    first = tl.load(idx_ptr + row * stride_i)
    tl.store(out_ptr + row, first + (tl.sum(acc, axis=0) > 2.0).to(first.dtype))


def draw(scores, seeds, offsets, indices=None):
    """A sampler-shaped launcher: one program per row walking the row in BLOCK_N steps."""
    batch, n_tokens = scores.size()
    if n_tokens == 1:
        return torch.zeros_like(scores, dtype=torch.long)
    if indices is None:
        indices = torch.arange(n_tokens, device=scores.device).expand_as(scores)
    out = indices[:, 0].clone()
    BLOCK_N = 256
    grid = [batch]
    _draw_kernel[grid](scores, indices, out, scores.stride(0), indices.stride(0), n_tokens,
                       BLOCK_N=BLOCK_N, num_warps=2)
    return out
