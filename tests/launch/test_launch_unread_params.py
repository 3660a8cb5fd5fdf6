"""A launch value that reaches only a kernel parameter the kernel never reads is no knob: Liger-Kernel's
fused_neighborhood_attention passes `num_stages` and `num_warps` by position into kernel parameters of
those names, which Triton binds as (unread) constexprs, not as the launch's options."""

from __future__ import annotations

from kernelsmith.launch.tunables import discover, relevant

CODE = '''
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr, num_stages: tl.constexpr, num_warps: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@triton.jit
def _reads_warps_kernel(x_ptr, n, BLOCK: tl.constexpr, num_warps: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * num_warps, mask=offs < n)


def scale(x):
    n = x.numel()
    BLOCK = 128
    num_stages = 4 if n >= 512 else 2
    num_warps = 8
    _scale_kernel[(triton.cdiv(n, BLOCK),)](x, n, BLOCK, num_stages, num_warps)
    return x


def scale_by_keyword(x):
    n = x.numel()
    warps = 8
    _scale_kernel[(triton.cdiv(n, 128),)](x, n, BLOCK=128, num_stages=2, num_warps=warps)
    return x


def reads(x):
    n = x.numel()
    nw = 2
    _reads_warps_kernel[(triton.cdiv(n, 64),)](x, n, 64, nw)
    return x
'''


def _kinds(entry):
    return {t.key: t.kind for t in relevant(discover(CODE), CODE, entry)}


def test_positional_num_warps_and_num_stages_into_unread_parameters_are_no_knobs():
    kinds = _kinds("scale")
    assert set(kinds.values()) == {"block"}, kinds  # only BLOCK, which sizes the tile


def test_by_keyword_they_are_launch_options_and_stay_knobs():
    kinds = set(_kinds("scale_by_keyword").values())
    assert {"num_warps", "num_stages"} <= kinds


def test_a_parameter_the_kernel_reads_stays_a_knob():
    assert "num_warps" in set(_kinds("reads").values())
