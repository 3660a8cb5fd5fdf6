"""Process-global settings that candidate code could change for everything that runs after it.

A worker that accepts a candidate goes on to evaluate (and time the base beside) the next ones, so
a setting the candidate leaves changed would reach them: the environment (Triton reads TRITON_* when
it compiles, and from C++, so `os.putenv` counts too), `triton.knobs` (cache and dump folders, debug,
always-compile, hooks and listeners Triton calls on every launch or compile), torch's numeric and
algorithm switches (TF32, reduced-precision reductions, cuDNN, default dtype and device, determinism,
threads, mode stacks), the CPU's flush-to-zero mode and the garbage collector. `capture()` reads them
all without side effects (no tensor is made, no tool is run); `diff()` names what changed.
Every reader is guarded: a setting this torch or Triton lacks (triton 3.6 has no autotuning listener)
is simply not watched.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
import warnings

import torch

try:
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - every supported triton (3.6 to 3.9) has knobs
    _knobs = None
try:
    from triton._C.libtriton import getenv as _process_getenv  # the C environment, as Triton sees it
except ImportError:  # pragma: no cover
    _process_getenv = None

_FS_ENCODING = sys.getfilesystemencoding()
_TINY = float("5e-324")  # the smallest denormal: flush-to-zero (or denormals-are-zero) makes it 0
_ONE = float("1")
_PRIMITIVE = (bool, int, float, str, bytes, type(None))
# Read from the C environment besides the knobs' own keys: Triton settings read once at import (so
# no knob descriptor names them), and what CUDA, cuBLAS and torch's C++ read from the environment.
_C_ENV_KEYS = frozenset({
    "TRITON_DEBUG", "TRITON_INSTRUMENTATION_MODE", "TRITON_INTERPRET", "CUDA_LAUNCH_BLOCKING",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_TF32_OVERRIDE", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_BLAS_PREFER_CUBLASLT", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT", "OMP_NUM_THREADS",
})


class _Unset:
    def __repr__(self) -> str:
        return "unset"


_MISSING = _Unset()

# torch switches that change results or timing of code that runs later: attribute paths under
# `torch`, "()" where the setting is read by calling a getter.
_TORCH = (
    "get_default_dtype()", "get_default_device()", "get_float32_matmul_precision()",
    "are_deterministic_algorithms_enabled()", "is_deterministic_algorithms_warn_only_enabled()",
    "get_num_threads()", "is_grad_enabled()",
    "_C._len_torch_function_stack()", "_C._len_torch_dispatch_stack()",  # a mode left pushed
    "backends.fp32_precision",
    "backends.cuda.matmul.allow_tf32", "backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "backends.cuda.matmul.allow_fp16_accumulation", "backends.cuda.matmul.fp32_precision",
    "backends.cuda.preferred_blas_library()", "backends.cuda.preferred_linalg_library()",
    "backends.cuda.flash_sdp_enabled()", "backends.cuda.mem_efficient_sdp_enabled()",
    "backends.cuda.math_sdp_enabled()", "backends.cuda.cudnn_sdp_enabled()",
    "backends.cudnn.enabled", "backends.cudnn.benchmark", "backends.cudnn.benchmark_limit",
    "backends.cudnn.deterministic", "backends.cudnn.allow_tf32", "backends.cudnn.fp32_precision",
    "backends.cudnn.conv.fp32_precision", "backends.mkldnn.enabled",
    "backends.mkldnn.matmul.fp32_precision", "backends.opt_einsum.enabled",
)


# (path, attribute names, called): split once, read on every capture (twice per watched call).
_TORCH_PARTS = tuple((p, tuple(p.removesuffix("()").split(".")), p.endswith("()")) for p in _TORCH)


def _read_torch(parts: tuple[str, ...], called: bool):
    obj = torch
    for part in parts:
        obj = getattr(obj, part)
    return obj() if called else obj


@functools.cache
def _knob_keys() -> frozenset[str]:
    """The environment variables read from the C environment: every one a triton.knobs setting
    reads (TRITON_* and a few others), plus `_C_ENV_KEYS`."""
    keys = set(_C_ENV_KEYS)
    for group in _knob_groups().values():
        for desc in vars(type(group)).values():
            key = getattr(desc, "key", None)
            if isinstance(key, str):
                keys.add(key)
    return frozenset(keys)


@functools.cache
def _knob_keys_bytes() -> frozenset[bytes]:
    return frozenset(k.encode(_FS_ENCODING, "surrogateescape") for k in _knob_keys())


def _knob_groups() -> dict[str, object]:
    if _knobs is None:
        return {}
    base = getattr(_knobs, "base_knobs", None)
    if base is None:  # pragma: no cover
        return {}
    return {name: value for name, value in vars(_knobs).items() if isinstance(value, base)}


class _Same:
    """An object compared by identity (holding it, so its id cannot be reused by a new one)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    __hash__ = None

    def __repr__(self) -> str:
        name = getattr(self.obj, "__qualname__", None) or getattr(self.obj, "__name__", None)
        return name if isinstance(name, str) else type(self.obj).__name__


class _Hooks(tuple):
    """A triton.knobs.HookChain as the callables it will call, in order."""

    def __repr__(self) -> str:
        return "[" + ", ".join(repr(h) for h in self[1:]) + "]"


def _comparable(value):
    """A value that `==` compares meaningfully: primitives and torch enums as they are, hook chains
    by the callables they hold, any other object by identity."""
    calls = getattr(value, "calls", None)
    if isinstance(calls, list) and not isinstance(value, type):  # triton.knobs.HookChain
        return _Hooks((_Same(value), *(_Same(c) for c in calls)))
    if isinstance(value, _PRIMITIVE):
        return value
    if isinstance(value, (torch.dtype, torch.device)) or type(value).__module__.startswith("torch"):
        return repr(value)
    return _Same(value)


def _triton(out: dict) -> None:
    if _knobs is None:
        return
    out["triton.knobs.propagate_env"] = _comparable(getattr(_knobs, "propagate_env", None))
    for gname, group in _knob_groups().items():
        prefix = f"triton.knobs.{gname}"
        out[prefix] = _Same(group)
        cls, own = vars(type(group)), vars(group)
        for name, value in cls.items():
            if name.startswith("__"):
                continue
            if hasattr(value, "__get__"):
                # Methods, properties and env-backed knobs: the class's object itself (reading an
                # env-backed knob can run a tool, e.g. ptxas --version), plus any value set from
                # Python over an env-backed one (the environment itself is captured separately).
                out[f"{prefix}.{name} (class)"] = _Same(value)
                if name in own:
                    out[f"{prefix}.{name}"] = _comparable(own[name])
            else:
                # Plain knobs (listeners, hook chains, debug): the value Triton will read.
                out[f"{prefix}.{name}"] = _comparable(getattr(group, name, _MISSING))
        for name in own.keys() - cls.keys():  # set on the group alone: what Triton will read
            out[f"{prefix}.{name}"] = _comparable(getattr(group, name, _MISSING))


def _decode(b: bytes) -> str:
    return b.decode(_FS_ENCODING, "surrogateescape")  # as os.environ decodes


@functools.cache
def _c_environ():
    """The C `environ` array (what getenv and Triton's knobs read), or None where libc has none."""
    try:
        return ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    except (OSError, ValueError, AttributeError):  # pragma: no cover - not glibc/musl
        return None


def _process_environment() -> dict[bytes, bytes] | None:
    """The C environment as it is now (first entry of a name wins, as getenv), or None."""
    array = _c_environ()  # mapped onto the variable itself: a putenv that moves the array is seen
    if array is None:
        return None
    out: dict[bytes, bytes] = {}
    i = 0
    while (entry := array[i]) is not None:
        key, _, value = entry.partition(b"=")
        out.setdefault(key, value)
        i += 1
    return out


_ENVIRON = "os.environ"  # capture()'s key for the environment's bytes; diff() names each variable


class _Environ(dict):
    """os.environ's bytes (name -> value) at one capture: copied and compared whole, in C (a capture
    runs twice per watched call); decoded per variable only when two captures differ."""

    def named(self) -> dict[str, str]:
        """'$NAME' -> value, decoded as os.environ decodes."""
        return {"$" + _decode(k): _decode(v) for k, v in self.items()}


def _environment(out: dict) -> None:
    data = os.environ._data  # type: ignore[attr-defined]  # posix: bytes -> bytes, kept by os.environ
    out[_ENVIRON] = _Environ(data)
    # os.putenv changes the C environment (what Triton's knobs and torch's C++ read) without
    # touching os.environ: read the keys they read straight from it, noting where they differ.
    keys = _knob_keys_bytes() | {k for k in data if k.startswith(b"TRITON")}
    process = _process_environment()
    for key in keys:
        if process is not None:
            value = process.get(key)
        elif _process_getenv is not None:
            try:
                text = _process_getenv(_decode(key))
            except Exception:  # noqa: BLE001 - an odd key: os.environ still covers it
                continue
            value = None if text is None else text.encode(_FS_ENCODING, "surrogateescape")
        else:
            continue
        if value != data.get(key):
            out[f"process environment ${_decode(key)}"] = _MISSING if value is None else _decode(value)


def capture() -> dict[str, object]:
    """name -> comparable value of every watched process-global setting, now."""
    out: dict[str, object] = {}
    _environment(out)
    _triton(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some torch switches warn when read (deprecated spellings)
        for path, parts, called in _TORCH_PARTS:
            try:
                out[f"torch.{path}"] = _comparable(_read_torch(parts, called))
            except Exception:  # noqa: BLE001 - not in this torch build
                continue
        if torch.cuda.is_initialized():  # asking earlier would initialise CUDA
            out["torch.cuda.current_device()"] = torch.cuda.current_device()
    out["cpu flush-to-zero (denormals)"] = (_TINY * _ONE) == 0.0
    out["gc.isenabled()"] = gc.isenabled()
    out["gc.get_threshold()"] = gc.get_threshold()
    return out


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def diff(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """'name: old -> new' for every setting that differs between two captures."""
    env_before, env_after = before.get(_ENVIRON, _Environ()), after.get(_ENVIRON, _Environ())
    before = {k: v for k, v in before.items() if k != _ENVIRON}
    after = {k: v for k, v in after.items() if k != _ENVIRON}
    if env_before != env_after:
        before.update(env_before.named())
        after.update(env_after.named())
    out = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name, _MISSING), after.get(name, _MISSING)
        if old != new:
            out.append(f"{name}: {_show(old)} -> {_show(new)}")
    return out


class GlobalSettings:
    """The settings as they were at construction; `changes()` lists what differs now."""

    def __init__(self):
        self.before = capture()

    def changes(self) -> list[str]:
        """What differs from the captured settings now."""
        return diff(self.before, capture())
