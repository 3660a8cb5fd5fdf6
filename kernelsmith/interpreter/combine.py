"""`tl.reduce` and `tl.associative_scan` with a kernel's own combine function, under the interpreter.

The Triton interpreter (3.9, checked) runs sum, min, max and argmin/argmax reductions and sum/prod
scans with NumPy, and any other combine function element by element in Python: one call per
element, each wrapping scalars in interpreter tensors. `tl.sort` is such a case (a bitonic network
whose every stage is an `xor_sum` reduction), and so is a segmented scan. Liger-Kernel's MoE
routing kernel sorts 1024 keys and scans them on every call: about 10 s a call that way.

Compiled Triton evaluates a combine function as a tree over the block, which its contract allows
(the function must be associative). These stand-ins do the same with whole blocks: a reduction
combines adjacent pairs (element 2i with 2i + 1, so order is kept for a non-commutative function)
until one is left; a scan is Hillis-Steele (step d combines element i - d with element i), order
kept as well. The combine function then runs once per level on NumPy blocks. One that cannot take
blocks (a Python `if` on its arguments, legal on compiled Triton's scalars: the truth of a block
raises while it runs) gets the interpreter's own element-by-element path.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from kernelsmith.interpreter import standins


@contextmanager
def _no_block_truth():
    """While a combine function runs on blocks: the truth of a block raises (the interpreter calls
    every block true, which would silently take one branch of an `if` for all elements)."""
    import triton.language as tl

    cls = tl.core.tensor
    current = cls.__bool__

    def __bool__(self):  # noqa: N807 - replaces __bool__
        if np.asarray(self.handle.data).size > 1:
            raise TypeError("the truth of a block")
        return current(self)

    cls.__bool__ = __bool__
    try:
        yield
    finally:
        cls.__bool__ = current


def _combine(ops, fn, left: list, right: list, dtypes: list) -> list:
    """fn(*left, *right) on blocks of NumPy data; the results cast back to the inputs' types, as
    the interpreter's own path stores them."""
    args = [ops.to_tensor(np.ascontiguousarray(d), t)
            for d, t in zip(left + right, dtypes + dtypes, strict=True)]
    with _no_block_truth():
        out = fn(*args)
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != len(left):
        raise TypeError("combine function returned another number of values")
    shape = left[0].shape
    results = []
    for value, ref in zip(out, left, strict=True):
        data = value.handle.data if hasattr(value, "handle") else np.asarray(getattr(value, "value", value))
        results.append(np.broadcast_to(np.asarray(data), shape).astype(ref.dtype))
    return results


def tree_reduce(ops, input) -> list:
    """ReduceOps.generic_reduce's result, computed level by level over the reduced axis."""
    original_axis = ops.axis
    input, axis = ops.unravel(input, ops.axis)
    dtypes = [t.dtype for t in input]
    datas = [np.asarray(t.handle.data) for t in input]
    if datas[0].shape[axis] == 0:
        raise ValueError("empty reduction")
    while datas[0].shape[axis] > 1:
        n = datas[0].shape[axis]
        pairs = n // 2
        even = [np.take(d, np.arange(0, 2 * pairs, 2), axis=axis) for d in datas]
        odd = [np.take(d, np.arange(1, 2 * pairs, 2), axis=axis) for d in datas]
        merged = _combine(ops, ops.combine_fn.fn, even, odd, dtypes)
        if n % 2:
            last = [np.take(d, [n - 1], axis=axis) for d in datas]
            merged = [np.concatenate([m, tail], axis=axis) for m, tail in zip(merged, last, strict=True)]
        datas = merged
    ret = []
    for data, dtype in zip(datas, dtypes, strict=True):
        data = np.squeeze(data, axis=axis)
        if ops.keep_dims:
            if original_axis is not None:
                data = np.expand_dims(data, axis)
            else:
                for _ in range(len(input[0].handle.data.shape)):
                    data = np.expand_dims(data, 0)
        elif original_axis is None:
            data = data.item()
        ret.append(ops.to_tensor(data, dtype))
    return ret


def tree_scan(ops, input) -> list:
    """ScanOps.generic_scan's result (an inclusive scan along the axis), in log2(n) steps. Each step
    combines whole blocks (the interpreter's blocks must keep power-of-two sizes): element i with
    element i - step, the first `step` elements kept as they are."""
    axis = ops.axis
    dtypes = [t.dtype for t in input]
    datas = [np.asarray(t.handle.data) for t in input]
    n = datas[0].shape[axis]
    shape = [1] * datas[0].ndim
    shape[axis] = n
    position = np.arange(n).reshape(shape)
    step = 1
    while step < n:
        earlier = [np.roll(d, step, axis=axis) for d in datas]  # element i - step at i (wrapped below step)
        with np.errstate(all="ignore"):  # the wrapped elements' results are discarded
            merged = _combine(ops, ops.combine_fn.fn, earlier, datas, dtypes)
        datas = [np.where(position >= step, m, d) for m, d in zip(merged, datas, strict=True)]
        step *= 2
    return [ops.to_tensor(np.ascontiguousarray(d), t) for d, t in zip(datas, dtypes, strict=True)]


def patch_combine() -> bool:
    """Reductions and scans with a kernel's combine function run over whole blocks (a tree, as
    compiled Triton runs them), else as the interpreter runs them."""
    from triton.runtime import interpreter

    reduce_cls, scan_cls = interpreter.ReduceOps, interpreter.ScanOps
    if getattr(reduce_cls.generic_reduce, "__ks_standin__", False):
        return False
    original_reduce, original_scan = reduce_cls.generic_reduce, scan_cls.generic_scan

    def generic_reduce(self, input):
        try:
            out = tree_reduce(self, input)
        except Exception:  # noqa: BLE001 - a combine function that needs scalars: the interpreter's way
            return original_reduce(self, input)
        standins.used(standins.StandIn.COMBINE)
        return out

    def generic_scan(self, input):
        try:
            out = tree_scan(self, input)
        except Exception:  # noqa: BLE001 - as above
            return original_scan(self, input)
        standins.used(standins.StandIn.COMBINE)
        return out

    generic_reduce.__ks_standin__ = generic_scan.__ks_standin__ = True
    reduce_cls.generic_reduce, scan_cls.generic_scan = generic_reduce, generic_scan
    return True
