"""Stand-in for `lmdeploy.utils` when running LMDeploy's kernel tests without its dependencies.

The kernel tests import only `is_bf16_supported` from `lmdeploy.utils`, whose module imports
transformers at the top. This stand-in answers the same question the same way for CUDA devices
(CUDA 11 or newer and compute capability 8.0 or higher); it is used by the `--light-stub` option
of kernelsmith's light-import pytest plugin, never by the kernels under test. `get_logger` is
there for blocked_gemm_fp8.py, which test_fill_kv_cache.py's blocked-fp8 case imports for its
reference (`quant_fp8`); it returns a standard-library logger of that name.
"""

import logging

import torch


def is_bf16_supported(device_type: str = "cuda") -> bool:
    """Whether the current device computes in bfloat16 (LMDeploy's rule for CUDA)."""
    if device_type not in ("cuda", "auto"):
        raise NotImplementedError(f"stand-in lmdeploy.utils: device_type {device_type!r} not covered")
    device = torch.cuda.current_device()
    cuda = torch.version.cuda
    return cuda is not None and int(cuda.split(".")[0]) >= 11 and \
        torch.cuda.get_device_properties(device).major >= 8


def get_logger(name: str | None = None, *args, **kwargs) -> logging.Logger:
    """A standard-library logger (LMDeploy's adds its own handler and format; no test reads them)."""
    return logging.getLogger(name)
