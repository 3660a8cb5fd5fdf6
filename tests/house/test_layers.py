"""The layering in pyproject's import-linter contracts holds, function-level imports included; no
module imports itself through a cycle; no first-level package outweighs the rest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; "
        "sys.argv[0] = 'lint-imports'; c()"]
MAX_SHARE = 0.30  # no first-level package over this share of the product's lines


def _lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([*LINT, "--config", str(tree / "pyproject.toml"), "--no-cache"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


_CYCLE = """
import graphlib, grimp, json
graph = grimp.build_graph("kernelsmith", "bot", cache_dir=None)
sorter = graphlib.TopologicalSorter({m: graph.find_modules_directly_imported_by(m) for m in graph.modules})
try:
    sorter.prepare()
    print(json.dumps(None))
except graphlib.CycleError as e:
    print(json.dumps(e.args[1]))
"""


def _cycle(tree: Path) -> list | None:
    """A module-level import cycle in kernelsmith/ and bot/ of `tree` (any import, any depth), or None;
    in a child, so the modules imported here are not the ones read."""
    proc = subprocess.run([sys.executable, "-P", "-c", _CYCLE], env={**os.environ, "PYTHONPATH": str(tree)},
                          cwd=tree, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(proc.stdout)


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for name in ("kernelsmith", "bot"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_contracts_kept():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_no_module_cycle():
    assert _cycle(ROOT) is None


def test_planted_upward_import_breaks_a_contract(tmp_path):
    """A function-level import of the search from the harness model (a stage importing one above it)."""
    tree = _copy(tmp_path)
    model = tree / "kernelsmith" / "harness" / "model.py"
    model.write_text(model.read_text() + "\n\ndef _planted():\n    from kernelsmith.search import loop\n"
                     "    return loop\n")
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "kernelsmith.harness.model -> kernelsmith.search.loop" in proc.stdout


def test_planted_referee_upward_import_breaks_a_contract(tmp_path):
    tree = _copy(tmp_path)
    backend = tree / "kernelsmith" / "referee" / "backend" / "base.py"
    backend.write_text(backend.read_text() + "\n\ndef _planted():\n"
                       "    from kernelsmith.referee.proc import runner\n    return runner\n")
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "kernelsmith.referee.backend.base -> kernelsmith.referee.proc.runner" in proc.stdout


def test_planted_cycle_is_found(tmp_path):
    tree = _copy(tmp_path)
    errors = tree / "kernelsmith" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _planted():\n"
                      "    from kernelsmith import paths\n    return paths\n")
    paths = tree / "kernelsmith" / "paths.py"
    paths.write_text(paths.read_text() + "\nfrom kernelsmith import errors  # noqa: E402\n")
    cycle = _cycle(tree)
    assert cycle is not None and {"kernelsmith.errors", "kernelsmith.paths"} <= set(cycle)


@pytest.mark.parametrize("package", sorted(p.name for p in (ROOT / "kernelsmith").iterdir()
                                           if (p / "__init__.py").is_file()))
def test_no_package_outweighs_the_rest(package):
    def lines(folder: Path) -> int:
        return sum(len(f.read_text().splitlines()) for f in folder.rglob("*.py"))

    total = lines(ROOT / "kernelsmith") + lines(ROOT / "bot")
    assert lines(ROOT / "kernelsmith" / package) <= MAX_SHARE * total


def test_the_referee_parent_side_imports_no_torch():
    """The CLI and the referee's parent never import torch: the fork server times that import, and
    commands that only read yamls or run directories stay quick."""
    code = "import sys, kernelsmith.referee, kernelsmith.cli; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-P", "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False"
