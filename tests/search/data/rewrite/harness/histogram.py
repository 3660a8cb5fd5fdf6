"""Harness for the atomics test kernel: a histogram."""

import torch

SHAPES = [{"n": 1 << 20, "bins": 256}]
CPU_SHAPES = [{"n": 100, "bins": 8}]
NONDETERMINISTIC = True


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randint(0, shape["bins"], (shape["n"],), generator=g, device=device, dtype=torch.int32)
    return {"x": x, "n_bins": shape["bins"]}


def reference(x, n_bins):
    return torch.bincount(x.long(), minlength=n_bins).int()
