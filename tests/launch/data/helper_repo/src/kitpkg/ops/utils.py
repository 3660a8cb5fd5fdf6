"""Launch settings shared by the fixture's operators (written for kernelsmith's tests in the shape
Triton kernel libraries give them: a power-of-two tile for the row and a warp ladder by tile size)."""

import torch
import triton


def on_rocm() -> bool:
    return torch.version.hip is not None


def device_name() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def row_settings(n):
    """(tile covering a row of n, warps for that tile)."""
    biggest = 65536
    tile = triton.next_power_of_2(n)
    if tile > biggest:
        raise RuntimeError(f"a row of {n} is longer than {biggest}")
    warps = 4
    if tile >= 32768:
        warps = 32 if not on_rocm() else 16
    elif tile >= 8192:
        warps = 16
    elif tile >= 2048:
        warps = 8
    return tile, warps


def capped_tile(n):
    """A tile for n, capped: the cap is a choice of this module."""
    return min(triton.next_power_of_2(n), 4096)
