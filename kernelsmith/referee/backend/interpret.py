"""The Triton interpreter on CPU: correctness and integrity only, no timing."""

from __future__ import annotations

import platform

from kernelsmith.interpreter import combine, libdevice, standins
from kernelsmith.referee.backend.base import Backend


class InterpretBackend(Backend):
    """Kernels run under TRITON_INTERPRET=1 on CPU tensors; nothing is timed."""

    name = "interpret"
    device = "cpu"
    timed = False

    def init_context(self) -> None:
        """Give kernel modules what they ask of a GPU, and work around the interpreter's known gaps
        (before any candidate runs; see standins.py)."""
        accept_list_grids()
        install_standins()

    def info(self) -> dict:
        """The CPU and library versions (no driver), and the stand-ins used so far in this process."""
        import torch
        import triton

        cpu = platform.processor() or platform.machine() or "cpu"
        used = sorted(standins.USED)
        name = f"Triton interpreter on {cpu}" + (f" (stand-ins: {', '.join(used)})" if used else "")
        return {"name": name, "driver": None, "torch": torch.__version__, "triton": triton.__version__,
                "stand_ins": used, "stand_in_gpu": standins.DEFAULT_GPU if used else None}


def install_standins() -> None:
    """The active-driver and device-property stand-ins, fp8 casts, `tl` aliases, float arguments,
    `tl.range` variables (standins.py), libdevice math (libdevice.py) and block combine functions
    (combine.py)."""
    def kernel_runs() -> bool:
        return libdevice.patch_kernel_runs(standins.alias_scopes, standins.bound_to_interpreter)

    for install in (standins.install_driver, standins.install_torch_cuda, standins.patch_fp8_casts,
                    standins.patch_tl_aliases, standins.patch_float_args, standins.patch_range_variables,
                    libdevice.patch_builder, combine.patch_combine, kernel_runs):
        try:
            install()
        except (AttributeError, ImportError, TypeError):
            pass  # another triton's interpreter lacks the hook: that stand-in is simply not given


def accept_list_grids() -> None:
    """Make the interpreter accept a list grid (`kernel[[n]](...)`, or a grid function returning one).

    Compiled Triton takes any sequence; the interpreter (3.9, checked) computes `grid + (1,) * k` and
    fails on a list. LMDeploy's multinomial_sampling launches with `grid = [batch_size]`.
    """
    from triton.runtime import interpreter

    cls = interpreter.GridExecutor
    if getattr(cls.__init__, "__ks_list_grid__", False):
        return
    original = cls.__init__

    def as_tuple(grid):
        if isinstance(grid, list):
            standins.used(standins.StandIn.LIST_GRIDS)
            return tuple(grid)
        return grid

    def __init__(self, fn, arg_names, grid, *args, **kwargs):  # noqa: N807 - replaces __init__
        if callable(grid):
            inner = grid
            grid = lambda meta: as_tuple(inner(meta))  # noqa: E731
        original(self, fn, arg_names, as_tuple(grid), *args, **kwargs)

    __init__.__ks_list_grid__ = True
    cls.__init__ = __init__
