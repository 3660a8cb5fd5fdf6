"""Harness for the loop-invariant test kernel: alpha * beta * sum(x[row]) + 3 * w[row]."""

import torch

SHAPES = [{"rows": 4096, "cols": 4096, "dtype": "float16"}]
CPU_SHAPES = [{"rows": 4, "cols": 40, "dtype": "float32"}, {"rows": 3, "cols": 16, "dtype": "float16"}]
VARY = {"rows": [1, 5], "cols": [7, 33]}
TOLERANCE = {"float32": {"atol": 1e-3, "rtol": 1e-4}}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device).to(dtype)
    w = torch.randn(shape["rows"], generator=g, device=device).to(dtype)
    return {"x": x, "w": w, "alpha": 0.5, "beta": 1.5}


def reference(x, w, alpha, beta):
    return (alpha * beta * x.double().sum(dim=1) + 3 * w.double()).float()
