"""Harness for the looped row-wise test kernel: per row, the sum of squares and the sum."""

import torch

SHAPES = [{"rows": 4096, "cols": 4096, "dtype": "float16"}]
CPU_SHAPES = [{"rows": 5, "cols": 40, "dtype": "float32"}, {"rows": 3, "cols": 16, "dtype": "float16"}]
VARY = {"rows": [1, 6], "cols": [7, 33]}
TOLERANCE = {"float32": {"atol": 1e-3, "rtol": 1e-4}}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device)
    return {"x": x.to(getattr(torch, shape["dtype"]))}


def reference(x):
    xd = x.double()
    return torch.stack([(xd * xd).sum(dim=1), xd.sum(dim=1)], dim=1).float()
