"""Harness for the elementwise test kernel: alpha * x + y."""

import torch

SHAPES = [{"n": 1 << 20, "dtype": "float16"}]
CPU_SHAPES = [{"n": 200, "dtype": "float32"}, {"n": 64, "dtype": "float16"}]
VARY = {"n": [1, 65, 333]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = torch.randn(shape["n"], generator=g, device=device).to(dtype)
    y = torch.randn(shape["n"], generator=g, device=device).to(dtype)
    return {"x": x, "y": y, "alpha": 0.5}


def reference(x, y, alpha):
    return (alpha * x.double() + y.double()).to(x.dtype)
