"""Stand-in for `lmdeploy.utils` when running LMDeploy's kernel tests without its dependencies.

The kernel tests import only `is_bf16_supported` from `lmdeploy.utils`, whose module imports
transformers at the top. This stand-in answers the same question the same way for CUDA devices
(CUDA 11 or newer and compute capability 8.0 or higher); it is used by the `--light-stub` option
of kernelsmith's light-import pytest plugin, never by the kernels under test.
"""

import torch


def is_bf16_supported(device_type: str = "cuda") -> bool:
    """Whether the current device computes in bfloat16 (LMDeploy's rule for CUDA)."""
    if device_type not in ("cuda", "auto"):
        raise NotImplementedError(f"stand-in lmdeploy.utils: device_type {device_type!r} not covered")
    device = torch.cuda.current_device()
    cuda = torch.version.cuda
    return cuda is not None and int(cuda.split(".")[0]) >= 11 and \
        torch.cuda.get_device_properties(device).major >= 8
