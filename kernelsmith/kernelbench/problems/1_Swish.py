import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish activation: x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


batch_size = 4096
dim = 8192
CPU_SIZES = {"batch_size": 3, "dim": 200}
VARY = {"batch_size": [1, 5], "dim": [64, 333]}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
