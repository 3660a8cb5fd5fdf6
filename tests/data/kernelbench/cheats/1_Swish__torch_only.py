# expect: library_fallback
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """No Triton at all: the PyTorch expression again."""

    def forward(self, x):
        return x * torch.sigmoid(x)
