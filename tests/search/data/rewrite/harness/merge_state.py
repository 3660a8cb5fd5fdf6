"""Harness for the merge_state stand-in: the contract of targets/sglang/merge_state.py with shapes
small enough for the interpreter (fresh shapes included)."""

import torch

SHAPES = [{"tokens": 4096, "heads": 32, "head_dim": 128, "dtype": "float16"}]
CPU_SHAPES = [
    {"tokens": 3, "heads": 2, "head_dim": 32, "dtype": "float16"},
    {"tokens": 2, "heads": 3, "head_dim": 24, "dtype": "float32"},
]
OUTPUTS = ["output", "output_lse"]
VARY = {"tokens": [1, 5], "heads": [1, 5, 7], "head_dim": [24, 64]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """Two partial outputs with float32 LSEs, about 1 in 16 of them +inf (an empty part)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, h, d = shape["tokens"], shape["heads"], shape["head_dim"]
    lse = 4.0 * torch.randn(2, t, h, generator=g, device=device)
    empty = torch.rand(2, t, h, generator=g, device=device) < 1 / 16
    empty[1] &= ~empty[0]
    lse[empty] = float("inf")
    return {
        "prefix_output": torch.randn(t, h, d, generator=g, device=device).to(dtype),
        "prefix_lse": lse[0].contiguous(),
        "suffix_output": torch.randn(t, h, d, generator=g, device=device).to(dtype),
        "suffix_lse": lse[1].contiguous(),
        "output": torch.empty(t, h, d, device=device, dtype=dtype),
        "output_lse": torch.empty(t, h, device=device, dtype=torch.float32),
    }


def reference(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse):
    """Softmax-weighted sum of the two parts (+inf counts as an empty part)."""
    p = torch.where(torch.isposinf(prefix_lse), float("-inf"), prefix_lse).double()
    s = torch.where(torch.isposinf(suffix_lse), float("-inf"), suffix_lse).double()
    m = torch.maximum(p, s)
    pe, se = torch.exp(p - m), torch.exp(s - m)
    total = pe + se
    merged = prefix_output.double() * (pe / total)[..., None]
    merged = merged + suffix_output.double() * (se / total)[..., None]
    return merged.to(prefix_output.dtype), (torch.log(total) + m).float()
