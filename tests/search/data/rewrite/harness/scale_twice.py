"""Harness for the repeated-loads test kernel."""

import torch

SHAPES = [{"rows": 4096, "cols": 4096, "dtype": "float16"}]
CPU_SHAPES = [{"rows": 3, "cols": 40, "dtype": "float32"}]
VARY = {"rows": [1, 4], "cols": [9, 64]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device).to(dtype)
    return {"x": x, "w": torch.randn(shape["cols"], generator=g, device=device).to(dtype)}


def reference(x, w):
    xd, wd = x.double(), w.double()
    return (xd * wd).to(x.dtype), (xd + 1 + wd).to(x.dtype)
