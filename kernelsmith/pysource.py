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


def reachable(code: str, entry: str) -> set[str]:
    """Functions of the file that `entry` may call (itself included), by name, transitively.

    `entry` may be dotted: `Class.method`, or `Function.apply` (an autograd Function: its `forward`).
    A function reaches the functions it names, the methods it names through a class of the file
    (`Class.method`, `Function.apply`), and the kernels it launches (`_kernel[grid](...)`); raises
    SyntaxError on bad code.
    """
    tree = parse(code)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    head, _, attr = entry.partition(".")
    seen, todo = set(), [method_of(classes.get(head), attr) if attr else head]
    while todo:
        name = todo.pop()
        if name is None or name in seen or name not in funcs:
            continue
        seen.add(name)
        for n in ast.walk(funcs[name]):
            if isinstance(n, ast.Name) and n.id in funcs:
                todo.append(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in classes:
                todo.append(method_of(classes[n.value.id], n.attr))
    return seen


def method_of(cls: ast.ClassDef | None, attr: str) -> str | None:
    """The name of the method `Class.attr` runs: `apply` of an autograd Function runs `forward`."""
    if cls is None:
        return None
    methods = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if attr == "apply" and "apply" not in methods and "forward" in methods:
        return "forward"
    return attr if attr in methods else None
