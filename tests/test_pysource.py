"""kernelsmith.pysource: facts read from the syntax tree, and the one parse every module uses."""

from __future__ import annotations

import ast
import subprocess
import threading
from pathlib import Path

from kernelsmith import pysource

ROOT = Path(__file__).resolve().parents[1]


def test_parse_holds_the_process_wide_lock_and_keeps_ast_parse_arguments(monkeypatch):
    """CPython 3.11 counts the AST constructor's depth per interpreter: two threads parsing at once
    can fail one (CI: an evaluator thread and the search loop). Every parse holds one lock."""
    seen = []
    real = ast.parse

    def watched(source, filename="<unknown>", mode="exec"):
        seen.append((pysource._PARSE_LOCK.locked(), filename, mode))
        return real(source, filename, mode)

    monkeypatch.setattr(ast, "parse", watched)
    assert isinstance(pysource.parse("x = 1"), ast.Module)
    assert isinstance(pysource.parse("1 + 2", "f.py", mode="eval"), ast.Expression)
    assert seen == [(True, "<unknown>", "exec"), (True, "f.py", "eval")]
    errors = []

    def many():
        try:
            for _ in range(50):
                pysource.parse("def f(a):\n    return [a + i for i in range(3)]\n" * 20)
        except Exception as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and not pysource._PARSE_LOCK.locked()


def test_the_package_parses_only_through_pysource():
    """A module calling ast.parse directly would race the others on CPython 3.11."""
    found = subprocess.run(["grep", "-rn", "--include=*.py", "ast.parse(", "kernelsmith"], cwd=ROOT,
                           capture_output=True, text=True).stdout.splitlines()
    assert [line for line in found if not line.startswith("kernelsmith/pysource.py")] == []
