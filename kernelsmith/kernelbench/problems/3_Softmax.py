import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over dim 1 of a (batch, dim) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 4096
CPU_SIZES = {"batch_size": 4, "dim": 100}
VARY = {"batch_size": [1, 6], "dim": [33, 128]}


def get_inputs():
    x = 3 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
