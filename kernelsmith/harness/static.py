"""A harness file checked from its syntax tree, without running it: it exists, parses and
defines the names the referee calls. Run before any child starts, so a broken harness is one line
naming the file, not a traceback from the referee."""

from __future__ import annotations

import ast
import stat
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.pysource import parse

REQUIRED = ("SHAPES", "make_inputs", "reference")
MAX_BYTES = 4 << 20


def module_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names bound at module level (defs, classes, assignments, imports, also inside top-level
    if/try/with/for blocks), and whether a `from … import *` makes the set incomplete."""
    names: set[str] = set()
    star = False

    def bind(target) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(body) -> None:
        nonlocal star
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                continue  # names bound inside are not the module's
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                bind(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.name == "*":
                        star = True
                    else:
                        names.add(a.asname or a.name.split(".")[0])
            # Blocks at module level (if/else, try/except/finally, with, for, while) bind there too.
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                visit(handler.body)

    visit(tree.body)
    return names, star


def check_harness_static(path: Path, where: str | None = None) -> None:
    """ConfigError naming the harness file when it is missing, does not parse or lacks a required
    name; `where` says which yaml field named it (for the not-found case)."""
    path = Path(path)
    named = f" ({where})" if where else ""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(path, f"harness file not found{named}") from None
    if not stat.S_ISREG(st.st_mode):  # a folder, a FIFO or a device would never read to its end
        raise ConfigError(path, f"not a regular file{named}")
    if st.st_size > MAX_BYTES:
        raise ConfigError(path, f"{st.st_size} bytes: too large for a harness (at most {MAX_BYTES})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(path, "not UTF-8 text: not a Python harness") from None
    try:
        tree = parse(text, filename=str(path))
    except SyntaxError as e:
        raise ConfigError(path, f"syntax error at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # null bytes
        raise ConfigError(path, f"not a Python file: {e}") from None
    names, star = module_names(tree)
    if star:  # `from x import *` may bring any name: the import in the sandbox decides
        return
    for name in REQUIRED:
        if name not in names:
            raise ConfigError(path, "missing (read from the file's syntax tree, not imported)", name)
