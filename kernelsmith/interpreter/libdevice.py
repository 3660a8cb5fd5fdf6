"""libdevice math under the Triton interpreter: what compiled Triton links from CUDA's libdevice.

Kernels import it as `from triton.language.extra.libdevice import tanh` (or `rsqrt`, `erf`, ...).
That module only declares the functions (their bodies are `...`): the compiler swaps in the
backend's versions (`triton.language.extra.cuda.libdevice`), which call `extern_elementwise`.
The interpreter does neither (triton 3.9, checked): the declared function returns None, and its
builder raises NotImplementedError for `extern_elementwise`. This stand-in computes the libdevice
symbols with NumPy (float32 ones in float64, rounded once to float32) and, while a kernel runs,
points the declared functions at the CUDA versions, as the compiler does.
"""

from __future__ import annotations

import math

import numpy as np

from kernelsmith.interpreter.standins import StandIn, used


def _torch(name: str):
    def op(x):
        import torch

        return getattr(torch.special, name)(torch.from_numpy(np.asarray(x, dtype=np.float64))).numpy()
    return op


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _normcdf(x):
    return 0.5 * _torch("erfc")(-np.asarray(x) / math.sqrt(2.0))


_UNARY = {
    "abs": np.abs, "fabs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin,
    "asinh": np.arcsinh, "atan": np.arctan, "atanh": np.arctanh, "cbrt": np.cbrt, "ceil": np.ceil,
    "cos": np.cos, "cosh": np.cosh, "erf": _torch("erf"), "erfc": _torch("erfc"),
    "erfinv": _torch("erfinv"), "exp": np.exp, "exp10": lambda x: np.power(10.0, x), "exp2": np.exp2,
    "expm1": np.expm1, "floor": np.floor, "lgamma": _torch("gammaln"), "log": np.log, "log10": np.log10,
    "log1p": np.log1p, "log2": np.log2, "nearbyint": np.rint, "rint": np.rint, "round": _round_half_away,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "tan": np.tan,
    "tanh": np.tanh, "trunc": np.trunc, "rcbrt": lambda x: 1.0 / np.cbrt(x), "normcdf": _normcdf,
    "saturate": lambda x: np.clip(x, 0.0, 1.0), "rcp": lambda x: 1.0 / x,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "finite": np.isfinite,
    "signbit": np.signbit,
}
_BINARY = {
    "atan2": np.arctan2, "copysign": np.copysign, "fdim": lambda x, y: np.maximum(x - y, 0.0),
    "fmod": np.fmod, "hypot": np.hypot, "pow": np.power, "powi": np.power,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "fdivide": np.divide,
}
FMA = "fma"  # fused multiply-add: the interpreter builder's own exact fma computes it
_TERNARY = {"fma": FMA}
# The float32 symbols' spellings: `__nv_<name>f`, `__nv_fast_<name>f`, `__nv_f<name>_rn`
# (rounded to nearest), `__nv_frsqrt_rn`, `__nv_<name>d` (a float64 predicate).
_RENAMES = {"saturatef": "saturate", "frcp_rn": "rcp", "drcp_rn": "rcp", "frsqrt_rn": "rsqrt",
            "fsqrt_rn": "sqrt", "dsqrt_rn": "sqrt", "fast_fdividef": "fdivide", "isfinited": "isfinite",
            "finitef": "finite", "fmaf": "fma", "fma_rn": "fma", "fmaf_rn": "fma"}


def _operation(symbol: str):
    """(numpy function, arity) for a CUDA libdevice symbol, or None where no stand-in exists."""
    name = symbol.removeprefix("__nv_")
    name = _RENAMES.get(name, name)
    candidates = [name]
    for prefix in ("fast_", "f", "d"):
        if name.startswith(prefix):
            candidates.append(name[len(prefix):])
    for c in list(candidates):
        for suffix in ("_rn", "f", "d"):
            if c.endswith(suffix):
                candidates.append(c[: -len(suffix)])
    for c in candidates:
        for table, arity in ((_UNARY, 1), (_BINARY, 2), (_TERNARY, 3)):
            if c in table:
                return table[c], arity
    return None


def create_extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):
    """The interpreter builder's `extern_elementwise`: the libdevice symbol computed with NumPy."""
    from triton.runtime import interpreter

    found = _operation(symbol)
    if found is None or len(args) != found[1]:
        raise NotImplementedError(f"{symbol}: no libdevice stand-in under the Triton interpreter")
    op, _ = found
    used(StandIn.LIBDEVICE)
    if op is FMA:
        return self.create_fma(*args)
    scalar = getattr(ret_type, "element_ty", ret_type)
    out_dtype = interpreter._get_np_dtype(scalar)
    values = [np.asarray(a.data) for a in args]
    wide = [v.astype(np.float64) if v.dtype == np.float32 else v for v in values]
    with np.errstate(all="ignore"):  # inf and NaN come out as the GPU gives them
        result = np.asarray(op(*wide))
    return interpreter.TensorHandle(result.astype(out_dtype), scalar)


def patch_builder() -> bool:
    """Give the interpreter's builder `extern_elementwise` for libdevice symbols."""
    from triton.runtime import interpreter

    cls = interpreter.InterpreterBuilder
    if getattr(cls.create_extern_elementwise, "__ks_standin__", False):
        return False
    create_extern_elementwise.__ks_standin__ = True
    cls.create_extern_elementwise = create_extern_elementwise
    return True


def declared_to_cuda(value):
    """The CUDA libdevice function a value of `triton.language.extra.libdevice` (a declaration the
    compiler replaces) stands for, or None."""
    if getattr(value, "__module__", None) != "triton.language.extra.libdevice" or not callable(value):
        return None
    try:
        from triton.language.extra.cuda import libdevice as cuda
    except ImportError:
        return None
    return getattr(cuda, getattr(value, "__name__", ""), None)


def module_patches() -> list[tuple[object, str, object]]:
    """(module, name, CUDA function) for each declared function of `triton.language.extra.libdevice`:
    while a kernel runs, `libdevice.tanh(x)` through the module finds the CUDA version."""
    try:
        from triton.language.extra import libdevice as declared
    except ImportError:
        return []
    out = []
    for name, value in vars(declared).items():
        real = declared_to_cuda(value)
        if real is not None:
            out.append((declared, name, real))
    return out


def cuda_members() -> list[tuple[object, str, object]]:
    """(module, name, function) for the CUDA libdevice functions, reached as module attributes
    (`tl.extra.cuda.libdevice.tanh`), which the interpreter does not bind as it binds `tl`'s."""
    try:
        from triton.language.extra.cuda import libdevice as cuda
    except ImportError:
        return []
    import triton.language as tl

    return [(cuda, name, value) for name, value in vars(cuda).items() if tl.core.is_builtin(value)]


def patch_kernel_runs(scopes_of, bound) -> bool:
    """While a kernel runs under the interpreter, every way a kernel reaches libdevice calls the
    CUDA version bound to the interpreter: a declared function imported by name (in the kernel's
    scopes, `scopes_of(fn)`), and both modules' attributes. `bound(f)` binds `f` to it."""
    from triton.runtime import interpreter

    cls = interpreter.GridExecutor
    if getattr(cls.__call__, "__ks_libdevice__", False):
        return False
    original = cls.__call__

    def __call__(self, *args, **kwargs):  # noqa: N807 - replaces __call__
        changed = []
        for owner, name, real in module_patches() + cuda_members():
            changed.append((owner, name, getattr(owner, name)))
            setattr(owner, name, bound(real))
        for scope in scopes_of(self.fn):
            for name, value in list(scope.items()):
                real = declared_to_cuda(value)
                if real is not None:
                    changed.append((scope, name, value))
                    scope[name] = bound(real)
        try:
            return original(self, *args, **kwargs)
        finally:
            for owner, name, value in reversed(changed):
                if isinstance(owner, dict):
                    owner[name] = value
                else:
                    setattr(owner, name, value)

    __call__.__ks_libdevice__ = True
    cls.__call__ = __call__
    return True
