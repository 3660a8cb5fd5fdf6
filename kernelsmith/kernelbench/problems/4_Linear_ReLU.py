import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer (weight and bias) followed by ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 1024
in_features = 2048
out_features = 2048
# K large enough that accumulation order shows (the referee must not call that lower precision).
CPU_SIZES = {"batch_size": 5, "in_features": 1024, "out_features": 40}
VARY = {"batch_size": [1, 9]}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
