"""pytest plugin: run an engine's own kernel tests without its heavy package imports.

    python -m pytest -p kernelsmith.lightimport --light-package lmdeploy.pytorch.kernels.cuda \\
        --light-stub lmdeploy.utils=stubs/lmdeploy_utils.py tests/pytorch/kernel/test_rms_norm.py

Upstream kernel tests import `lmdeploy.pytorch.kernels.cuda` (or `sglang.kernels...`), whose
package `__init__` files pull in transformers, pydantic, ray and more, while the kernels need only
torch and triton. This plugin registers each named package and its parents WITHOUT running their
`__init__`: the named package resolves the names its `__init__` re-exports (`from .x import y`)
lazily, importing only the submodule asked for, so the test files run unmodified. A `--light-stub`
replaces one module (such as a helper imported only for a flag) with a small stand-in file.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

from kernelsmith.loader import register_packages
from kernelsmith.pysource import parse


class LazyPackage(types.ModuleType):
    """A package whose `__init__` did not run; its re-exported names load on first access."""

    __ks_lazy__: dict[str, tuple[str, str]]

    def __getattr__(self, name: str):
        lazy = self.__dict__.get("__ks_lazy__", {})
        if name not in lazy:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module, attr = lazy[name]
        value = importlib.import_module(module)
        if attr:
            value = getattr(value, attr)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value) -> None:
        # Loading submodule `x` binds it on the package; a re-exported `x` (the function of the
        # same name, as the real `__init__` binds it) must win, as it does after a real import.
        lazy = self.__dict__.get("__ks_lazy__", {})
        if name in lazy and isinstance(value, types.ModuleType) and lazy[name][1]:
            return
        super().__setattr__(name, value)


def reexports(init_file: Path, package: str) -> dict[str, tuple[str, str]]:
    """Names an `__init__.py` binds with relative `from .mod import name [as alias]` statements."""
    tree = parse(Path(init_file).read_text(), str(init_file))
    names: dict[str, tuple[str, str]] = {}
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body)  # conditional re-exports: the primary branch
            continue
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        module = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            if alias.name == "*":
                continue
            if node.module:
                names[alias.asname or alias.name] = (module, alias.name)
            else:  # `from . import sub`: the submodule itself
                names[alias.asname or alias.name] = (f"{module}.{alias.name}", "")
    return names


def find_root(package: str, search: list[str]) -> Path:
    """The first folder on `search` that holds `package` (a folder with `__init__.py`)."""
    rel = Path(*package.split("."))
    for entry in search:
        base = Path(entry or ".").resolve()
        if (base / rel / "__init__.py").is_file():
            return base
    raise ImportError(f"--light-package {package}: no {rel}/__init__.py under {search[:4]}...")


def install_light_package(package: str, search: list[str] | None = None) -> types.ModuleType:
    """Register `package` and its parents without running any `__init__`; return the package."""
    search = search if search is not None else [os.getcwd(), *sys.path]
    root = find_root(package, search)
    init = root.joinpath(*package.split("."), "__init__.py")
    register_packages(root, str(init.relative_to(root)))
    module = sys.modules[package]
    module.__class__ = LazyPackage
    module.__dict__["__ks_lazy__"] = reexports(init, package)
    return module


def install_stub(name: str, path: str | Path) -> types.ModuleType:
    """Load the file at `path` as module `name` (its parents registered without `__init__`)."""
    path = Path(os.path.expandvars(str(path))).resolve()
    if not path.is_file():
        raise ImportError(f"--light-stub {name}: {path} not found")
    parent, _, child = name.rpartition(".")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__ks_stub__ = True
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if parent and parent in sys.modules:
        types.ModuleType.__setattr__(sys.modules[parent], child, module)
    return module


def pytest_addoption(parser) -> None:
    """--light-package NAME and --light-stub NAME=PATH (both repeatable)."""
    group = parser.getgroup("kernelsmith", "kernelsmith light imports")
    group.addoption("--light-package", action="append", default=[], metavar="NAME",
                    help="register NAME and its parents without running their __init__")
    group.addoption("--light-stub", action="append", default=[], metavar="NAME=PATH",
                    help="load the file PATH as module NAME (a stand-in for a heavy helper)")


def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Install the light packages before any conftest or test module imports the engine."""
    ns = early_config.known_args_namespace
    for package in getattr(ns, "light_package", None) or []:
        install_light_package(package)
    for item in getattr(ns, "light_stub", None) or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--light-stub {item!r}: expected NAME=PATH")
        install_stub(name, path)
