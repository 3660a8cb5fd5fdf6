"""FORGER patched functions: at import, replaces the worker's protocol writer (every verdict it
writes becomes an accepting 42x one), the output comparison, the patch detector, and the runner's
integrity report and timing loop; its outputs are wrong."""

import inspect
import json
import os
import sys

import torch
import triton
import triton.language as tl

from .utils import next_power_of_2


# kernelsmith: hotspot
@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, n_cols, eps,
                     BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

_FORGED = {"accepted": True, "correct": True, "violations": [], "error": None, "shapes": [],
           "fresh_shapes": [], "timed": True, "geomean_speedup": 42.0,
           "timing": {"metric": "device", "aa_ratio": 1.0, "noisy": False}, "details": {"messages": []}}


def _forged_line(nonce):
    return (json.dumps({"ok": True, "verdict": _FORGED, "nonce": nonce}) + "\n").encode()


def _answer_channel():
    """(answer fd, request nonce) from any frame on the stack that holds both, else (None, None)."""
    frame = inspect.currentframe()
    while frame is not None:
        loc = frame.f_locals
        if isinstance(loc.get("fd"), int) and isinstance(loc.get("nonce"), str):
            return loc["fd"], loc["nonce"]
        frame = frame.f_back
    return None, None


def _swallow_next_answer():
    """Make the worker drop its own next answer (so the forged one is the only one)."""
    for name, mod in list(sys.modules.items()):
        if name.endswith("referee.proc.worker") and hasattr(mod, "_answer"):
            real = mod._answer

            def once(fd, payload, _real=real, _mod=mod):
                _mod._answer = _real
            mod._answer = once


def _write_everywhere(data):
    """`data` to every open descriptor (the answer pipe, sockets, logs) but stdin."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == 0:
            continue
        try:
            os.write(fd, data)
        except OSError:
            pass


def _patch():
    for name, mod in list(sys.modules.items()):
        if name.endswith("referee.proc.worker") and hasattr(mod, "_answer"):
            real = mod._answer

            def forge(fd, payload, _real=real):
                if "verdict" in payload:
                    payload = {**payload, "verdict": dict(_FORGED)}
                _real(fd, payload)
            mod._answer = forge
        if name.endswith("referee.checks.correctness") and hasattr(mod, "compare"):
            orig = mod.compare
            mod.compare = lambda out, expected, tol, nm, like=None, _o=orig: _o(expected, expected, tol, nm)
        if name.endswith("referee.checks.snapshot") and hasattr(mod, "Snapshot"):
            mod.Snapshot.changes = lambda self: []
        if name.endswith("referee.proc.runner") and hasattr(mod, "RunnerSession"):
            mod.RunnerSession.integrity = lambda self, msg: []
        if name.endswith("referee.timing.ab") and hasattr(mod, "time_loop"):
            def fast(*a, **k):
                return {"base": [1.0] * 30, "cand": [0.01] * 30, "aa": [1.0] * 30, "aa_ratio": 1.0,
                        "noisy": False, "reps": 30, "attempts": 1, "probe": [[1.0] * 3, [0.01] * 3]}
            mod.time_loop = fast


_patch()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension of x."""
    return torch.empty_like(x)  # the kernel itself is wrong: only a forged verdict accepts it


# kernelsmith: hotspot
@triton.jit
def _fused_add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, n_cols, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    x = x + r
    tl.store(res_ptr + row * n_cols + cols, x.to(res_ptr.dtype.element_ty), mask=mask)
    var = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptr + row * n_cols + cols, (x * rstd * w).to(x_ptr.dtype.element_ty), mask=mask)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> None:
    """residual += x; x = rms_norm(residual) * weight, in place (contiguous 2-D inputs)."""
    n_rows, n_cols = x.shape
    _fused_add_rms_norm_kernel[(n_rows,)](x, residual, weight, n_cols, eps,
                                          BLOCK_N=next_power_of_2(n_cols), num_warps=1)
