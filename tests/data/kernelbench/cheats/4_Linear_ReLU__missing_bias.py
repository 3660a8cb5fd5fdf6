# expect: incorrect
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu_kernel(x_ptr, w_ptr, out_ptr, M, N, K,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K),
                    other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.maximum(acc, 0.0),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    """Drops the bias: relu(x @ W.T) instead of relu(x @ W.T + b)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.weight.shape[0]
        out = torch.empty(M, N, device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        _linear_relu_kernel[grid](x, self.weight, out, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        return out
