"""run.json is read in one place: kernelsmith/runspec.py (RunSpec). Every other module of the product
and the bot gets a RunSpec, never the file or its dict: no other module names the file by a literal,
and none reads the path runspec.run_file or RUN_FILE gives."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "kernelsmith" / "runspec.py"
READS = {"read_text", "read_bytes", "open", "load", "loads"}  # path.read_text(), open(path), json.load(f)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (prose may name run.json)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _names_run_file(node: ast.AST) -> bool:
    """Whether an expression is built from runspec's name for the file (run_file(...), RUN_FILE)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in ("run_file", "RUN_FILE"):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in ("run_file", "RUN_FILE"):
            return True
    return False


def offences(text: str, where: str) -> list[str]:
    """Where a module's source (`where`: its name) names run.json by a literal or reads the run file."""
    tree = ast.parse(text, where)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and (node.value == "run.json" or node.value.endswith("/run.json"))):
            found.append((node.lineno, f"the literal {node.value!r}"))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                name, parts = func.attr, [func.value, *node.args]
            else:
                name, parts = getattr(func, "id", ""), node.args
            if name in READS and any(_names_run_file(a) for a in parts):
                found.append((node.lineno, f"reads the run file ({name})"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def _modules() -> list[Path]:
    return sorted(p for pkg in ("kernelsmith", "bot") for p in (ROOT / pkg).rglob("*.py") if p != OWNER)


def test_only_runspec_reads_run_json():
    found = [o for p in _modules() for o in offences(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


def test_the_check_sees_a_literal_and_a_read_of_the_run_file():
    text = ('import json\nfrom kernelsmith.runspec import run_file\n\n\ndef a(d):\n'
            '    return json.loads((d / "run.json").read_text())\n\n\ndef b(d):\n'
            '    return run_file(d).read_text()\n\n\ndef c(d):\n    """Reads d/run.json: prose."""\n'
            '    return run_file(d).is_file()\n')
    assert offences(text, "planted.py") == ["planted.py:6: the literal 'run.json'",
                                            "planted.py:10: reads the run file (read_text)"]
