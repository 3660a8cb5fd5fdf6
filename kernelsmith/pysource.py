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

    Kernel launches (`_kernel[grid](...)`) count as references; raises SyntaxError on bad code.
    """
    tree = parse(code)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        todo.extend(n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name) and n.id in funcs)
    return seen
