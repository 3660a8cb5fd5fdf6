"""An upstream-style kernel file (written for these tests): autotuned matmul with triton.Config
lists, a size heuristic for a second kernel, and asserts that bound the block sizes."""

import torch
import triton
import triton.language as tl

MAX_BLOCK_K = 256


def _configs():
    return [
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=3),
        triton.Config(
            {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=4
        ),
    ]


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    tl.static_assert(BLOCK_K <= 256)
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _k in range(0, K, BLOCK_K):
        acc += 1.0
    tl.store(c_ptr + pid, tl.sum(acc))


@triton.jit
def _scale_kernel(x_ptr, n, SCALE_BLOCK: tl.constexpr):
    offs = tl.program_id(0) * SCALE_BLOCK + tl.arange(0, SCALE_BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * 2, mask=offs < n)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
    _matmul_kernel[grid](a, b, c, M, N, K)
    return c


def scale_(x: torch.Tensor) -> None:
    n = x.numel()
    if n <= 4096:
        block = 128
        warps = 2
    else:
        block = 1024
        warps = 4
    assert block <= 8192
    _scale_kernel[(triton.cdiv(n, block),)](x, n, SCALE_BLOCK=block, num_warps=warps, num_stages=2)
