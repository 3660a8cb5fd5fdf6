import torch
import torch.nn as nn


class Model(nn.Module):
    """RMS normalization over the last dimension with a learned scale."""

    def __init__(self, num_features: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 4096
features = 4096
CPU_SIZES = {"batch_size": 3, "features": 96}
VARY = {"batch_size": [5, 7]}


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features]
