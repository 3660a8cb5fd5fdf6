"""A harness file checked from its syntax tree, without running it: it exists, parses, defines
the names the referee calls and declares well-formed VARIANTS. Run before any child starts, so a
broken harness is one line naming the file, not a traceback from the referee."""

from __future__ import annotations

import ast
import stat
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.harness.variants import FIELD, parse_variants, variant_shapes
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


def harness_tree(path: Path, where: str | None = None) -> ast.Module:
    """The harness file's syntax tree; ConfigError naming the file when it is missing, not a
    regular file, too large or does not parse (`where` says which yaml field named it)."""
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
        return parse(text, filename=str(path))
    except SyntaxError as e:
        raise ConfigError(path, f"syntax error at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # null bytes
        raise ConfigError(path, f"not a Python file: {e}") from None


def _assigned_to(node: ast.stmt) -> list[ast.expr]:
    """The targets of a top-level (annotated) assignment; none for any other statement."""
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target] if isinstance(node, ast.AnnAssign) else []


def declared_variants(tree: ast.Module, path: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """The harness's VARIANTS read as data from its syntax tree (harness/variants.py): one
    top-level assignment of a literal, so the parent knows them without running the harness."""
    assigned = [n for n in tree.body
                if any(isinstance(t, ast.Name) and t.id == FIELD for t in _assigned_to(n))]
    names, _ = module_names(tree)
    if not assigned:
        if FIELD in names:
            raise ConfigError(path, "must be assigned a literal at the module's top level (read as data, "
                              "never run)", FIELD)
        return {}
    if len(assigned) > 1:
        raise ConfigError(path, f"assigned {len(assigned)} times (lines "
                          f"{', '.join(str(n.lineno) for n in assigned)}): assign it once", FIELD)
    try:
        value = ast.literal_eval(assigned[0].value) if assigned[0].value is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError(path, f"line {assigned[0].lineno}: must be a literal (dicts, lists, strings, "
                          "numbers): it is read as data, never run", FIELD) from None
    return parse_variants(value, path)


def harness_variants(path: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """The harness file's VARIANTS, name -> (shapes, cpu_shapes), read from its syntax tree."""
    return declared_variants(harness_tree(path), Path(path))


def check_harness_static(path: Path, where: str | None = None, variant: str | None = None) -> None:
    """ConfigError naming the harness file when it is missing, does not parse, lacks a required
    name or has malformed VARIANTS, or `variant` is not one of them; `where` says which yaml field
    named it (for the not-found case)."""
    path = Path(path)
    tree = harness_tree(path, where)
    variants = declared_variants(tree, path)
    if variant is not None:
        variant_shapes(variants, variant, path)
    names, star = module_names(tree)
    if star:  # `from x import *` may bring any name: the import in the sandbox decides
        return
    for name in REQUIRED:
        if name not in names:
            raise ConfigError(path, "missing (read from the file's syntax tree, not imported)", name)
