"""Harness modules: how to make inputs for an operator, its reference, and its shapes."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.errors import ConfigError
from kernelsmith.harness.entry import entry_caller, parse_outputs, resolve_entry
from kernelsmith.harness.variants import parse_variants, shape_list, variant_shapes

# Default (atol, rtol) by output dtype name (docs/design.md, Pinned details). fp8's rtol is one unit
# in the last place (3 and 2 mantissa bits): a kernel's fp32 division (Triton's `/` is approximate)
# moves a value that lies within an fp32 ulp of an fp8 rounding boundary across it, about one
# element in a million.
DEFAULT_TOLERANCE = {
    "float64": {"atol": 1e-7, "rtol": 1e-7},
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-2, "rtol": 1e-2},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
    "float8_e4m3fn": {"atol": 1e-1, "rtol": 0.125},
    "float8_e5m2": {"atol": 2e-1, "rtol": 0.25},
}


@dataclass
class Harness:
    """A validated harness module (see docs/design.md: Harness module)."""

    path: Path
    module: Any
    shapes: list[dict]
    cpu_shapes: list[dict]
    outputs: list[str] | None  # OUTPUTS as input names the entry writes
    inplace: list[str]
    tolerance: dict[str, dict[str, float]]
    vary: dict[str, list]
    nondeterministic: bool
    make_inputs: Callable[..., dict]
    reference: Callable[..., Any]
    bytes_moved: Callable[[dict], int] | None = None
    flops: Callable[[dict], int] | None = None
    # How to call a loaded module (`bind(module)`: KernelBench tasks, whose entry is a class).
    bind: Callable[[Any], Callable] | None = None
    # The base is a pure library call (KernelBench): it is the reference itself, with zero error.
    library_base: bool = False
    extra: dict = field(default_factory=dict)
    # OUTPUTS as positions of the tuple the entry (or `call`) returns, and the harness's
    # `call(entry, inputs)` hook: target/entry.py.
    positions: list[int] | None = None
    call: Callable[[Callable, dict], Any] | None = None
    variant: str | None = None  # the VARIANTS entry whose shapes these are (harness/variants.py)

    def shapes_for(self, device: str) -> list[dict]:
        """GPU shapes on CUDA; CPU_SHAPES (or SHAPES when absent) under the interpreter."""
        if device == "cuda":
            return self.shapes
        return self.cpu_shapes or self.shapes

    def callable_of(self, module, entry: str):
        """What the referee calls for a loaded operator module, `fn(**inputs)`: the harness's
        `bind(module)`, else its (dotted) entry, through the `call` hook and the output picking of
        target/entry.py (AttributeError when the module lacks the entry)."""
        fn = self.bind(module) if self.bind is not None else resolve_entry(module, entry)
        return entry_caller(fn, call=self.call, names=self.outputs, positions=self.positions, path=self.path)

    def output_labels(self, count: int) -> list[str]:
        """How messages name the compared outputs: the OUTPUTS input names, the return positions,
        else by their order."""
        if self.outputs:
            return list(self.outputs)
        if self.positions:
            return [f"output {p}" for p in self.positions]
        return [f"output {i}" for i in range(count)]

    @property
    def written(self) -> set[str]:
        """The arguments the entry may write: OUTPUTS and INPLACE (every other input is read-only)."""
        return set(self.outputs or []) | set(self.inplace)

    @property
    def reference_source(self) -> str | None:
        """The reference function's source text (what the LLM's prompt shows), or None."""
        try:
            return inspect.getsource(self.reference)
        except (OSError, TypeError):
            return None

    def tolerance_for(self, dtype_name: str) -> tuple[float, float]:
        """(atol, rtol) for an output dtype: the harness's override, else the default."""
        tol = self.tolerance.get(dtype_name) or DEFAULT_TOLERANCE.get(dtype_name) or {"atol": 0, "rtol": 0}
        return float(tol.get("atol", 0.0)), float(tol.get("rtol", 0.0))


def private_module_name(path: Path, prefix: str = "_ks_harness") -> str:
    """A module name derived from the file path, never its package name (avoids shadowing)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    return f"{prefix}_{digest}"


def _folder_package(folder: Path) -> str:
    """A private package over a harness's folder (made once per process), so a harness may import
    the modules beside it relatively (`from ._shared import x`) and none of them takes a real
    package's name (the referee pins those files with the harness: referee/proc/pinned.py)."""
    name = private_module_name(folder, "_ks_harness_dir")
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    return name


def _import_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(path, "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise ConfigError(path, f"syntax error at line {e.lineno}: {e.msg}") from None
    except Exception as e:
        sys.modules.pop(name, None)
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        raise ConfigError(path, f"import failed: {tb}") from None
    return module


def _callable(module, path: Path, attr: str, required: bool):
    fn = getattr(module, attr, None)
    if fn is None:
        if required:
            raise ConfigError(path, "missing required function", attr)
        return None
    if not callable(fn):
        raise ConfigError(path, "must be a function", attr)
    return fn


def load_harness(path: str | Path, variant: str | None = None) -> Harness:
    """Import a harness by file path under a private name and validate its fields; with `variant`,
    its shapes are that VARIANTS entry's (ConfigError naming the field for an unknown one)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ConfigError(path, "harness file not found")
    module = _import_file(path, f"{_folder_package(path.parent)}.{private_module_name(path)}")
    outputs, positions = parse_outputs(getattr(module, "OUTPUTS", None), path)
    inplace = list(getattr(module, "INPLACE", None) or [])
    tolerance = getattr(module, "TOLERANCE", None) or {}
    if not isinstance(tolerance, dict):
        raise ConfigError(path, "must map a dtype name to {atol, rtol}", "TOLERANCE")
    for key, tol in tolerance.items():
        if not isinstance(tol, dict) or not set(tol) <= {"atol", "rtol"}:
            raise ConfigError(path, "must be {atol: float, rtol: float}", f"TOLERANCE.{key}")
    vary = getattr(module, "VARY", None) or {}
    if not isinstance(vary, dict):
        raise ConfigError(path, "must map a shape field to a list of values", "VARY")
    for key, values in vary.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(path, "must be a non-empty list of values", f"VARY.{key}")
    shapes = shape_list(getattr(module, "SHAPES", None), path, "SHAPES", True)
    cpu_shapes = shape_list(getattr(module, "CPU_SHAPES", None), path, "CPU_SHAPES", False)
    variants = parse_variants(getattr(module, "VARIANTS", None), path)
    if variant is not None:
        shapes, cpu_shapes = variant_shapes(variants, variant, path)
    return Harness(
        path=path,
        module=module,
        shapes=shapes,
        cpu_shapes=cpu_shapes,
        outputs=outputs,
        inplace=inplace,
        tolerance=tolerance,
        vary={k: list(v) for k, v in vary.items()},
        nondeterministic=bool(getattr(module, "NONDETERMINISTIC", False)),
        make_inputs=_callable(module, path, "make_inputs", True),
        reference=_callable(module, path, "reference", True),
        bytes_moved=_callable(module, path, "bytes_moved", False),
        flops=_callable(module, path, "flops", False),
        bind=_callable(module, path, "bind", False),
        library_base=bool(getattr(module, "LIBRARY_BASE", False)),
        positions=positions,
        call=_callable(module, path, "call", False),
        variant=variant,
    )
