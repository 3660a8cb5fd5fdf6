"""Small facts about Python source read from its syntax tree (never by running it)."""

from __future__ import annotations

import ast
import threading

# CPython 3.11 counts the AST constructor's recursion depth per interpreter, not per thread: two
# threads parsing at once can fail one with "SystemError: AST constructor recursion depth mismatch"
# (python/cpython#106905; seen in CI while an evaluator thread and the search loop both parsed).
_PARSE_LOCK = threading.Lock()


def parse(source, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse`, one thread at a time (see _PARSE_LOCK)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename, mode)


def entry_parts(entry: str) -> list[str]:
    """The names of a (dotted) entry: `fn`, `Class.method`, `Function.apply`."""
    return entry.split(".")


def is_entry_name(entry: str) -> bool:
    """Whether `entry` names a function as users find it: `fn`, or a dotted `Class.method` (at most
    three names)."""
    parts = entry_parts(entry)
    return 1 <= len(parts) <= 3 and all(p.isidentifier() for p in parts)


def entry_def(tree: ast.Module, entry: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def a (dotted) entry runs, found in the module's syntax tree: a top-level function, a
    method of a top-level class (nested classes too), and for `Function.apply` of a class that
    defines `forward` (a torch.autograd.Function, whose inherited `apply` runs `forward`), that
    `forward`. None when the module does not define it (an imported name, say)."""
    *classes, last = entry_parts(entry)
    body = tree.body
    for name in classes:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            return None
        body = cls.body
    defs = {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if classes and last == "apply" and "apply" not in defs:
        return defs.get("forward")
    return defs.get(last)


def reachable(code: str, entry: str) -> set[str]:
    """Functions of the file that `entry` may call (itself included), by name, transitively.

    Kernel launches (`_kernel[grid](...)`) count as references; raises SyntaxError on bad code. A
    dotted entry starts from the def it runs (`entry_def`), named by its own name (`forward`); a
    method a function names through a class of the file (`Function.apply`, `Class.method`) counts.
    """
    tree = parse(code)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    start = entry_def(tree, entry) if "." in entry else funcs.get(entry)
    if start is None:
        return set()
    seen = {start.name}
    todo = _named(start, funcs, tree)
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        todo.extend(_named(funcs[name], funcs, tree))
    return seen


def _named(fn: ast.AST, funcs: dict, tree: ast.Module) -> list[str]:
    """The functions `fn` names: by name, or as a method through a class of the file."""
    out = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in funcs:
            out.append(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            method = entry_def(tree, f"{n.value.id}.{n.attr}")
            if method is not None:
                out.append(method.name)
    return out
