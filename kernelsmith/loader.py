"""The one loader: operator files (base and candidates) as sibling modules of their real package.

Parent packages are registered without running their `__init__` (their `__path__` points into the
checkout), so a kernel file's relative imports resolve while the heavy package imports are skipped.
Base and candidate are two modules of the same package, each under its own name, so they can be
timed interleaved in one process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

from kernelsmith.errors import ConfigError


class HeavyImportError(ImportError):
    """A kernel file imports a module that is not installed (suggest a `stubs:` entry)."""


def _import_root(root: Path, rel_file: str) -> tuple[Path, tuple[str, ...]]:
    """(folder imports resolve from, dotted parts of the file's package) for `rel_file` under `root`.

    Where the file's folders carry `__init__.py`, the package starts at the topmost such folder, so
    `python/sglang/kernels/x.py` (SGLang's layout) is package `sglang.kernels` rooted at `python/`.
    Without any `__init__.py` every folder counts (namespace-package layout, as before).
    """
    parts = Path(rel_file).with_suffix("").parts[:-1]
    n = 0
    while n < len(parts) and (root.joinpath(*parts[: len(parts) - n]) / "__init__.py").is_file():
        n += 1
    if n:
        return root.joinpath(*parts[: len(parts) - n]), parts[len(parts) - n:]
    return root, parts


def package_name_for(root: Path, rel_file: str) -> str:
    """The dotted package that holds `rel_file` under `root`, or a synthetic one for top-level files."""
    _, parts = _import_root(Path(root).resolve(), rel_file)
    if parts and all(p.isidentifier() for p in parts):
        return ".".join(parts)
    digest = hashlib.sha1(str((root / rel_file).resolve().parent).encode()).hexdigest()[:10]
    return f"_ks_pkg_{digest}"


def register_packages(root: Path, rel_file: str) -> str:
    """Register the package chain of `rel_file` in sys.modules without running any `__init__`."""
    root = Path(root).resolve()
    pkg = package_name_for(root, rel_file)
    if pkg.startswith("_ks_pkg_"):
        _ensure_package(pkg, (root / rel_file).resolve().parent)
        return pkg
    base, _ = _import_root(root, rel_file)
    parts = pkg.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        _ensure_package(name, base.joinpath(*parts[: i + 1]))
        if i:
            setattr(sys.modules[".".join(parts[:i])], parts[i], sys.modules[name])
    return pkg


def _ensure_package(name: str, folder: Path) -> None:
    existing = sys.modules.get(name)
    if existing is not None and str(folder) in list(getattr(existing, "__path__", []) or []):
        return
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]
    module.__package__ = name
    module.__file__ = str(folder / "__init__.py")
    spec = importlib.util.spec_from_loader(name, loader=None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module.__spec__ = spec
    sys.modules[name] = module


def install_stubs(stubs: dict[str, Path]) -> None:
    """Load the target's stand-ins for heavy modules under the names the kernel file imports."""
    for name, path in stubs.items():
        if name in sys.modules and getattr(sys.modules[name], "__ks_stub__", False):
            continue
        if not Path(path).is_file():
            raise ConfigError(path, "stub file not found", f"stubs.{name}")
        parent = name.rpartition(".")[0]
        if parent and parent not in sys.modules:
            _ensure_package(parent, Path(path).parent)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        module.__ks_stub__ = True
        sys.modules[name] = module
        spec.loader.exec_module(module)


def load_operator_module(root: Path, rel_file: str, *, code: str | None = None, tag: str = "base",
                         source_path: Path | None = None, stubs: dict[str, Path] | None = None):
    """Load `rel_file` (or `code` replacing it) as module `<package>._ks_<tag>_<stem>`.

    `source_path` is where the code lives on disk (Triton reads kernel source through inspect);
    `__file__` stays the real path so code that finds data files beside itself still works.
    Raises HeavyImportError when the file imports a module that is not installed.
    """
    root = Path(root).resolve()
    real = (root / rel_file).resolve()
    if stubs:
        install_stubs(stubs)
    pkg = register_packages(root, rel_file)
    if code is None:
        code = real.read_text()
        source_path = real
    if source_path is None:
        raise ValueError("source_path is required with code (Triton needs the source on disk)")
    source_path = Path(source_path)
    if source_path != real and (not source_path.exists() or source_path.read_text() != code):
        source_path.parent.mkdir(parents=True, exist_ok=True)
        source_path.write_text(code)
    name = f"{pkg}._ks_{tag}_{real.stem}"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(real))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(real)
    module.__package__ = pkg
    sys.modules[name] = module
    compiled = compile(code, str(source_path), "exec")
    try:
        exec(compiled, module.__dict__)
    except ModuleNotFoundError as e:
        sys.modules.pop(name, None)
        missing = e.name or str(e)
        top = pkg.split(".")[0]
        if missing.split(".")[0] == top:
            raise
        raise HeavyImportError(
            f"{rel_file} imports {missing!r}, which is not installed; if it is needed only for a "
            f"constant or enum, name a small stand-in in the target yaml: stubs: {{{missing}: path}}"
        ) from e
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
