"""Stand-in for `unsloth.kernels.utils`, which Unsloth's swiglu and geglu kernel files import for a
device context and launch helpers.

`unsloth.kernels.utils` imports Unsloth's device detection, bitsandbytes and unsloth_zoo at module
level; the kernel files named in targets/unsloth.yaml use only what is defined here, answered the
way unsloth/kernels/utils.py answers it (unsloth 2026.10.9) on a CUDA build with Triton 3.
"""

from contextlib import nullcontext

import torch
import triton
from triton.language.extra import libdevice

MAX_FUSED_SIZE: int = 65536
next_power_of_2 = triton.next_power_of_2
triton_tanh = libdevice.tanh


def calculate_settings(n: int) -> tuple[int, int]:
    """(BLOCK_SIZE, num_warps) for a row of n elements, as upstream."""
    BLOCK_SIZE: int = next_power_of_2(n)
    if BLOCK_SIZE > MAX_FUSED_SIZE:
        raise RuntimeError(f"Cannot launch Triton kernel since n = {n} exceeds the maximum CUDA blocksize = "
                           f"{MAX_FUSED_SIZE}.")
    num_warps: int = 4
    if BLOCK_SIZE >= 32768:
        num_warps = 32
    elif BLOCK_SIZE >= 8192:
        num_warps = 16
    elif BLOCK_SIZE >= 2048:
        num_warps = 8
    return BLOCK_SIZE, num_warps


def torch_gpu_device(device):
    """The device context upstream uses: torch.cuda.device with several GPUs, else none."""
    return torch.cuda.device(device) if torch.cuda.device_count() > 1 else nullcontext()
