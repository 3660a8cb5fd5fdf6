"""Harness for the tokens x heads test kernel: x times a per-(token, head) gate clamped at zero."""

import torch

SHAPES = [{"tokens": 4096, "heads": 32, "dim": 128, "dtype": "float16"}]
CPU_SHAPES = [{"tokens": 3, "heads": 5, "dim": 16, "dtype": "float32"},
              {"tokens": 2, "heads": 3, "dim": 24, "dtype": "float16"}]
VARY = {"tokens": [1, 4], "heads": [1, 6, 7], "dim": [8, 40]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, h, d = shape["tokens"], shape["heads"], shape["dim"]
    return {"x": torch.randn(t, h, d, generator=g, device=device).to(dtype),
            "gate": torch.randn(t, h, generator=g, device=device).to(dtype)}


def reference(x, gate):
    return (x.double() * gate.double().clamp(min=0)[..., None]).to(x.dtype)
