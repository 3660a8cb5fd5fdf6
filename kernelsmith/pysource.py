"""Small facts about Python source read from its syntax tree (never by running it)."""

from __future__ import annotations

import ast


def reachable(code: str, entry: str) -> set[str]:
    """Functions of the file that `entry` may call (itself included), by name, transitively.

    Kernel launches (`_kernel[grid](...)`) count as references; raises SyntaxError on bad code.
    """
    tree = ast.parse(code)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        todo.extend(n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name) and n.id in funcs)
    return seen
