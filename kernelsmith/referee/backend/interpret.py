"""The Triton interpreter on CPU: correctness and integrity only, no timing."""

from __future__ import annotations

import platform

from .base import Backend


class InterpretBackend(Backend):
    """Kernels run under TRITON_INTERPRET=1 on CPU tensors; nothing is timed."""

    name = "interpret"
    device = "cpu"
    timed = False

    def info(self) -> dict:
        """The CPU and library versions (no driver)."""
        import torch
        import triton

        cpu = platform.processor() or platform.machine() or "cpu"
        return {"name": f"Triton interpreter on {cpu}", "driver": None, "torch": torch.__version__,
                "triton": triton.__version__}
