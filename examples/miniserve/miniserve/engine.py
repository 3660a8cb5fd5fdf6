"""A toy decoder block that calls the kernels (shows how the ops are used)."""

import torch

from .kernels.rms_norm import rms_norm
from .kernels.silu_and_mul import silu_and_mul


class Engine:
    """One MLP block: norm, gate/up projection, SiLU-and-mul, down projection."""

    def __init__(self, hidden: int, inter: int, device: str = "cuda", dtype=torch.float16):
        g = torch.Generator(device="cpu").manual_seed(0)
        self.norm_w = torch.ones(hidden, dtype=dtype, device=device)
        self.w_gate_up = (torch.randn(hidden, 2 * inter, generator=g) / hidden**0.5).to(device, dtype)
        self.w_down = (torch.randn(inter, hidden, generator=g) / inter**0.5).to(device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [tokens, hidden] -> [tokens, hidden]."""
        h = rms_norm(x, self.norm_w)
        gate_up = h @ self.w_gate_up
        act = torch.empty(x.shape[0], gate_up.shape[1] // 2, dtype=x.dtype, device=x.device)
        silu_and_mul(act, gate_up)
        return x + act @ self.w_down
