"""SEARCH/REPLACE parsing and application, full rewrites, and edits written back out."""

from __future__ import annotations

import pytest

from kernelsmith.search.edits import (
    Edit,
    EditError,
    apply_edits,
    format_edit,
    format_edits,
    make_edits,
    parse_edits,
    parse_proposal,
)

CODE = (
    "import triton\n\n\ndef f(x):\n    BLOCK = 64\n    y = x + 1\n"
    "    return launch(x, BLOCK=BLOCK, num_warps=1)\n"
)


def test_parse_and_apply():
    text = "Bigger block.\n" + format_edit("    BLOCK = 64\n", "    BLOCK = 256\n")
    edits = parse_edits(text)
    assert edits == [Edit("    BLOCK = 64\n", "    BLOCK = 256\n")]
    assert "BLOCK = 256" in apply_edits(CODE, edits)


def test_tolerates_trailing_space_and_indent_shift():
    # The model dropped the indentation and left trailing blanks: still one clear match.
    text = "<<<<<<< SEARCH\nBLOCK = 64   \ny = x + 1\n=======\nBLOCK = 128\ny = x + 2\n>>>>>>> REPLACE\n"
    out, kind = parse_proposal(text, CODE)
    assert kind == "edits" and "    BLOCK = 128\n    y = x + 2\n" in out


@pytest.mark.parametrize(
    "text, message",
    [
        ("<<<<<<< SEARCH\nBLOCK = 64\n>>>>>>> REPLACE\n", "no ======= divider"),
        ("<<<<<<< SEARCH\nBLOCK = 64\n=======\nBLOCK = 1\n", "no >>>>>>> REPLACE"),
        (format_edit("    BLOCK = 65\n", "    BLOCK = 1\n"), "not found"),
        (format_edit("    BLOCK = 64\n", "    BLOCK = (\n"), "not valid Python"),
        (format_edit("    BLOCK = 64\n", "    BLOCK = 64\n"), "change nothing"),
        ("just words", "no SEARCH/REPLACE block"),
        ("```python\nx = 1\n```", "fragment"),
        ("", "empty"),
    ],
)
def test_unusable_answers(text, message):
    with pytest.raises(EditError, match=message):
        parse_proposal(text, CODE)


def test_full_rewrite():
    new = CODE.replace("num_warps=1", "num_warps=8")
    out, kind = parse_proposal(f"All of it:\n```python\n{new}```\n", CODE)
    assert kind == "rewrite" and out == new


def test_make_edits_round_trip_with_unique_search():
    old = CODE + "\n\ndef g(x):\n    BLOCK = 64\n    return x\n"
    new = old.replace("    BLOCK = 64\n    return x", "    BLOCK = 512\n    return x").replace(
        "num_warps=1", "num_warps=4"
    )
    edits = make_edits(old, new)
    for e in edits:
        assert old.count(e.search) == 1  # context grew until the SEARCH text is unique
    assert apply_edits(old, parse_edits(format_edits(edits))) == new
