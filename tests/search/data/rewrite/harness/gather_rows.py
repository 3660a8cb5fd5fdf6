"""Harness for the gather test kernel: table[ids]."""

import torch

SHAPES = [{"rows": 4096, "dim": 1024, "n": 8192, "dtype": "float16"}]
CPU_SHAPES = [{"rows": 10, "dim": 24, "n": 7, "dtype": "float32"}]


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    table = torch.randn(shape["rows"], shape["dim"], generator=g, device=device)
    ids = torch.randint(0, shape["rows"], (shape["n"],), generator=g, device=device)
    return {"table": table.to(getattr(torch, shape["dtype"])), "ids": ids}


def reference(table, ids):
    return table[ids]
