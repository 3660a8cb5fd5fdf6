"""docs/faults.md's matrix stays honest: each row names a test that exists, every fault test has a
row, and no row says data was lost without saying what."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["fault", "command", "what happens", "data lost", "test"]


def _rows() -> list[dict]:
    lines = [ln for ln in (ROOT / "docs" / "faults.md").read_text().splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[2:]]
    return [dict(zip(header, row, strict=True)) for row in cells]


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_row_names_an_existing_test():
    rows = _rows()
    assert len(rows) >= 20
    for row in rows:
        path, _, name = row["test"].strip("`").partition("::")
        assert (ROOT / path).is_file(), row["test"]
        assert name in _functions(ROOT / path), row["test"]
        assert row["data lost"].startswith("none"), row["fault"]
        assert all(row[c] for c in COLUMNS), row


def test_every_fault_test_has_a_row():
    named = {r["test"].strip("`") for r in _rows()}
    here = Path(__file__).resolve().parent
    for path in sorted(here.glob("test_faults_*.py")):
        if path.name == Path(__file__).name:
            continue
        for name in _functions(path):
            test = f"tests/faults/{path.name}::{name}"
            assert test in named, f"{test} has no row in docs/faults.md"
