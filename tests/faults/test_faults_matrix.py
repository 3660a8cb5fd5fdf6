"""docs/faults.md's matrix stays honest: each row names a test that exists, every fault test has a
row, and no row says data was lost without saying what."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["fault", "command", "what happens", "data lost", "test"]


def _rows() -> list[dict]:
    """The matrix's entries: a `### fault` heading, then one `- field: value` line per column (a value
    may go on over indented lines)."""
    text = (ROOT / "docs" / "faults.md").read_text()
    matrix = text.split("\n## The matrix\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for block in matrix.split("\n### ")[1:]:
        heading, _, body = block.partition("\n")
        fields = {"fault": heading.strip()}
        for item in body.strip().split("\n- "):
            key, sep, value = item.removeprefix("- ").partition(":")
            assert sep, f"not a `- field: value` line under {heading!r}: {item!r}"
            fields[key.strip()] = " ".join(value.split())
        assert list(fields) == COLUMNS, (heading, list(fields))
        rows.append(fields)
    return rows


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
