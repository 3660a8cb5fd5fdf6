"""A stand-in with the structure of SGLang's merge_state kernel (written for these tests): two partial
attention outputs merged by their log-sum-exps, grid (tokens, heads), one padded head row per
program, program counts read back from the grid, an optional LSE output and no block constant."""

import torch
import triton
import triton.language as tl


@triton.jit
def merge_lse_kernel(
    out_ptr,  # [T, H, D]
    out_lse_ptr,  # [T, H]
    a_ptr,  # [T, H, D]
    a_lse_ptr,  # [T, H]
    b_ptr,  # [T, H, D]
    b_lse_ptr,  # [T, H]
    DIM: tl.constexpr,
    DIM_POW2: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    t = tl.program_id(0)
    n_t = tl.num_programs(0)  # noqa: F841 - read as upstream does, unused
    h = tl.program_id(1)
    n_h = tl.num_programs(1)

    la = tl.load(a_lse_ptr + t * n_h + h)
    lb = tl.load(b_lse_ptr + t * n_h + h)
    # +inf marks an empty part
    la = float("-inf") if la == float("inf") else la
    lb = float("-inf") if lb == float("inf") else lb
    top = tl.maximum(la, lb)
    wa = tl.exp(la - top)
    wb = tl.exp(lb - top)
    total = wa + wb
    if WRITE_LSE:
        tl.store(out_lse_ptr + t * n_h + h, tl.log(total) + top)

    d = tl.arange(0, DIM_POW2)
    keep = d < DIM
    row = (t * n_h + h) * DIM
    xa = tl.load(a_ptr + row + d, mask=keep)
    xb = tl.load(b_ptr + row + d, mask=keep)
    merged = xa * (wa / total) + xb * (wb / total)
    tl.store(out_ptr + row + d, merged, mask=keep)


def merge_state_triton(
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output: torch.Tensor | None = None,
    output_lse: torch.Tensor | None = None,
):
    if output is None:
        output = torch.empty_like(prefix_output)
    if output_lse is None:
        output_lse = torch.empty_like(prefix_lse)
    n_tokens, n_heads, dim = output.shape
    merge_lse_kernel[(n_tokens, n_heads)](
        output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse,
        dim, triton.next_power_of_2(dim), output_lse is not None,
    )
    return output, output_lse
