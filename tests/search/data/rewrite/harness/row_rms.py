"""Harness for the row-wise reduction test kernel: x / rms(x) per row, and the rms."""

import torch

SHAPES = [{"rows": 4096, "cols": 4096, "dtype": "float16"}]
CPU_SHAPES = [{"rows": 5, "cols": 48, "dtype": "float32"}, {"rows": 3, "cols": 64, "dtype": "float16"}]
VARY = {"rows": [1, 6, 9], "cols": [17, 64]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device)
    return {"x": x.to(getattr(torch, shape["dtype"])), "eps": 1e-6}


def reference(x, eps):
    rms = torch.sqrt((x.double() ** 2).mean(dim=1) + eps)
    return (x.double() / rms[:, None]).to(x.dtype), rms.float()
