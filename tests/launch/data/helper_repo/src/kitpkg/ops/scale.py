"""Launch values that come from callers, from other files and from nowhere the code says
(kernelsmith's test fixture)."""

import triton
import triton.language as tl

from kitpkg.ops.settings_gone import warps_for_rows
from kitpkg.ops.utils import capped_tile


@triton.jit
def _scale_kernel(x_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def _launch(x, factor, BLOCK=256, num_warps=4):
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, BLOCK),)](x, n, factor, BLOCK=BLOCK, num_warps=num_warps)


def scale(x, factor):
    """Scales x in place: a launcher called with a tile here, its default warps kept."""
    if x.numel() > 4096:
        _launch(x, factor, BLOCK=1024)
    else:
        _launch(x, factor)
    return x


def scale_as_told(x, factor, BLOCK):
    """The tile is the caller's."""
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, BLOCK),)](x, n, factor, BLOCK=BLOCK, num_warps=warps_for_rows(n))
    return x


def scale_capped(x, factor):
    """The tile is capped in ops/utils.py: a choice this file cannot change."""
    n = x.numel()
    BLOCK = capped_tile(n)
    _scale_kernel[(triton.cdiv(n, BLOCK),)](x, n, factor, BLOCK=BLOCK)
    return x
