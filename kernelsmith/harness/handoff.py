"""What the functions and Triton kernels an entry hands a tensor to say of it, for `harness new`:
a helper's body and docstring (its rank, dimension names, element type), a kernel that loads the
tensor and uses the loaded values as offsets of another load or store (an integer tensor).

Which function a call reaches is the `reach`'s answer: `SameFile` knows the entry file's own
functions; launch.follow's `HelperReach` also those of modules of the checkout the file imports.
Both read syntax trees only; no target code runs.
"""

from __future__ import annotations

import ast
import re

from kernelsmith.harness.tensors import TensorUse, read_uses

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_JIT = re.compile(r"\b(jit|autotune|heuristics)\b")


class SameFile:
    """The functions of the entry's own file, by name."""

    def __init__(self, tree: ast.Module):
        self.funcs = {n.name: n for n in tree.body if isinstance(n, _DEFS)}

    def callee(self, where, func: ast.expr) -> tuple[ast.FunctionDef, object] | None:
        """(def, its module) for a call of `func`, or None."""
        fn = self.funcs.get(func.id) if isinstance(func, ast.Name) else None
        return (fn, where) if fn is not None else None


def tensor_uses(fn: ast.AST, names: list[str], reach=None, where=None,
                depth: int = 2) -> dict[str, TensorUse]:
    """What `fn` and (through `reach`, `depth` calls deep) what it hands them to say of `names`;
    `where` is `fn`'s module as `reach` names it."""
    uses = read_uses(fn, names)
    if reach is None or depth <= 0:
        return uses
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.value if isinstance(node.func, ast.Subscript) else node.func  # `kernel[grid](...)`
        got = reach.callee(where, func)
        if got is None or got[0] is fn:
            continue
        callee, module = got
        params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
        pairs = [(p, a.id) for p, a in zip(params, node.args, strict=False) if isinstance(a, ast.Name)]
        pairs += [(k.arg, k.value.id) for k in node.keywords if k.arg and isinstance(k.value, ast.Name)]
        mine = {p: arg for p, arg in pairs if arg in uses and p in params}
        if not mine:
            continue
        if any(_JIT.search(ast.unparse(d)) for d in callee.decorator_list):
            for p, line in _offsets(callee, set(mine)).items():
                u = uses[mine[p]]
                if not u.dtype:
                    u.dtype = "int32"
                    u.dtype_why = f"kernel {callee.name} offsets pointers by its values (line {line})"
            continue
        theirs = tensor_uses(callee, list(mine), reach, module, depth - 1)
        for p, arg in mine.items():
            _merge(uses[arg], theirs[p], callee.name)
    return uses


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _pointer(call: ast.Call) -> ast.expr | None:
    """The pointer argument of `tl.load` / `tl.store` / `tl.atomic_*`, or None for other calls."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and (f.attr in ("load", "store") or f.attr.startswith("atomic_"))):
        return None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "pointer"), None)


def _offsets(kernel: ast.FunctionDef, params: set[str]) -> dict[str, int]:
    """The parameters whose loaded values offset a pointer of another load or store: param -> line."""
    loaded: dict[str, str] = {}  # a local holding values loaded from (or computed from) a param
    assigns = [n for n in ast.walk(kernel) if isinstance(n, ast.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0], ast.Name)]
    for a in assigns:
        if isinstance(a.value, ast.Call) and _pointer(a.value) is not None:
            hit = sorted(params & _names(_pointer(a.value)))
            if hit:
                loaded[a.targets[0].id] = hit[0]
    for a in assigns:  # one step on: `e = idx.to(tl.int64)`, `row = e * stride`
        if not (isinstance(a.value, ast.Call) and _pointer(a.value) is not None):
            src = sorted(set(loaded) & _names(a.value))
            if src:
                loaded.setdefault(a.targets[0].id, loaded[src[0]])
    found: dict[str, int] = {}
    for n in ast.walk(kernel):
        if isinstance(n, ast.Call) and _pointer(n) is not None:
            for local in sorted(set(loaded) & _names(_pointer(n))):
                found.setdefault(loaded[local], n.lineno)
    return found


def _merge(u: TensorUse, other: TensorUse, callee: str) -> None:
    """Add what a callee says of its parameter to what the entry says of the argument (not the
    bounds: they name the callee's variables)."""
    if other.rank and not (u.exact and other.rank != u.rank):
        if other.exact and not u.exact and other.rank >= u.rank:
            u.rank, u.exact = other.rank, True
        u.rank = max(u.rank, other.rank)
        for pos, name in other.dims.items():
            u.dims.setdefault(pos, name)
    if other.dtype and not u.dtype:
        u.dtype, u.dtype_why = other.dtype, f"{other.dtype_why} (in {callee})"
