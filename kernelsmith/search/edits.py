"""SEARCH/REPLACE edits: parse a model's answer, apply it to a file, and write edits back out.

The format (the one the prompts ask for):

    <<<<<<< SEARCH
    exact lines of the current file
    =======
    the lines that replace them
    >>>>>>> REPLACE

A full rewrite is accepted too: one fenced ```python block holding the whole file.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from kernelsmith.pysource import parse

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)


class EditError(ValueError):
    """An answer that is not a usable proposal (no edits, bad markers, SEARCH text not found)."""


@dataclass(frozen=True)
class Edit:
    """Replace the exact text `search` (one occurrence) with `replace`."""

    search: str
    replace: str


def format_edit(old: str, new: str) -> str:
    """One SEARCH/REPLACE block (old and new are whole lines)."""
    old = old if old.endswith("\n") or not old else old + "\n"
    new = new if new.endswith("\n") or not new else new + "\n"
    return f"<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"


def format_edits(edits: list[Edit]) -> str:
    """Several blocks, blank-line separated."""
    return "\n".join(format_edit(e.search, e.replace) for e in edits)


def parse_edits(text: str) -> list[Edit]:
    """Every SEARCH/REPLACE block in `text`; an unterminated or unbalanced block is an EditError."""
    edits: list[Edit] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        start = i
        i += 1
        old: list[str] = []
        while i < len(lines) and not _DIVIDER.match(lines[i]):
            if _SEARCH.match(lines[i]) or _REPLACE.match(lines[i]):
                raise EditError(f"SEARCH block at line {start + 1} has no ======= divider")
            old.append(lines[i])
            i += 1
        if i >= len(lines):
            raise EditError(f"SEARCH block at line {start + 1} has no ======= divider")
        i += 1
        new: list[str] = []
        while i < len(lines) and not _REPLACE.match(lines[i]):
            if _SEARCH.match(lines[i]) or _DIVIDER.match(lines[i]):
                raise EditError(f"SEARCH block at line {start + 1} has no >>>>>>> REPLACE end")
            new.append(lines[i])
            i += 1
        if i >= len(lines):
            raise EditError(f"SEARCH block at line {start + 1} has no >>>>>>> REPLACE end")
        i += 1
        if not "".join(old).strip():
            raise EditError(f"SEARCH block at line {start + 1} is empty")
        edits.append(Edit(_with_newline("".join(old)), _with_newline("".join(new))))
    return edits


def _with_newline(s: str) -> str:
    return s if not s or s.endswith("\n") else s + "\n"


def apply_edits(code: str, edits: list[Edit]) -> str:
    """Apply edits in order; SEARCH text must match exactly, else ignoring trailing whitespace and
    a uniform indentation shift. EditError names the first block that matches nowhere."""
    for n, edit in enumerate(edits, 1):
        code = _apply_one(code, edit, n)
    return code


def _apply_one(code: str, edit: Edit, n: int) -> str:
    if not code.endswith("\n"):
        code += "\n"
    pos = code.find(edit.search)
    if pos >= 0:
        return code[:pos] + edit.replace + code[pos + len(edit.search) :]
    lines = code.splitlines(keepends=True)
    old = edit.search.splitlines()
    new = edit.replace.splitlines()
    for start in range(len(lines) - len(old) + 1):
        window = [ln.rstrip("\r\n") for ln in lines[start : start + len(old)]]
        shift = _match_shift(window, old)
        if shift is None:
            continue
        fixed = [_reindent(ln, shift) for ln in new]
        return (
            "".join(lines[:start]) + "".join(f"{ln}\n" for ln in fixed) + "".join(lines[start + len(old) :])
        )
    first = old[0].strip() if old else ""
    raise EditError(f"edit {n}: SEARCH text not found in the file (first line: {first[:80]!r})")


def _match_shift(window: list[str], old: list[str]) -> str | int | None:
    """None when no match; else how to re-indent the replacement (0, +prefix str, or -n chars)."""
    if [w.rstrip() for w in window] == [o.rstrip() for o in old]:
        return 0
    pairs = [(w, o) for w, o in zip(window, old, strict=True) if w.strip() or o.strip()]
    if not pairs or any(w.strip() != o.strip() for w, o in pairs):
        return None
    deltas = {len(w) - len(w.lstrip()) - (len(o) - len(o.lstrip())) for w, o in pairs}
    if len(deltas) != 1:
        return None
    delta = deltas.pop()
    if delta > 0:
        w, _ = pairs[0]
        return w[:delta]
    return delta


def _reindent(line: str, shift: str | int) -> str:
    if not line.strip() or shift == 0:
        return line
    if isinstance(shift, str):
        return shift + line
    cut = -shift
    return line[cut:] if line[:cut].strip() == "" else line.lstrip()


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block in `text`."""
    return [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(text)]


def parse_proposal(text: str, parent_code: str) -> tuple[str, str]:
    """A model's answer -> (new code, "edits" | "rewrite"); EditError when it is neither usable
    SEARCH/REPLACE edits nor one full file that parses."""
    if text is None or not text.strip():
        raise EditError("empty answer")
    if _SEARCH.search(text) or any(_SEARCH.match(ln) for ln in text.splitlines()):
        edits = parse_edits(text)
        if edits:
            code = apply_edits(parent_code, edits)
            _check_python(code)
            if code.strip() == parent_code.strip():
                raise EditError("the edits change nothing")
            return code, "edits"
    blocks = [body for lang, body in fenced_blocks(text) if lang in ("python", "py", "")]
    if not blocks:
        raise EditError("no SEARCH/REPLACE block and no fenced ```python file in the answer")
    code = max(blocks, key=len)
    _check_python(code)
    if len(code.strip().splitlines()) < max(3, len(parent_code.strip().splitlines()) // 3):
        raise EditError("the fenced code is a fragment, not the whole file (use SEARCH/REPLACE for edits)")
    return code, "rewrite"


def _check_python(code: str) -> None:
    try:
        parse(code)
    except SyntaxError as e:
        raise EditError(f"the result is not valid Python: line {e.lineno}: {e.msg}") from None


def unified_diff(old: str, new: str, path: str) -> str:
    """A unified diff of old -> new, with a/ and b/ prefixes on `path`."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )


def make_edits(old: str, new: str) -> list[Edit]:
    """The smallest SEARCH/REPLACE edits turning `old` into `new`, each SEARCH unique in `old`."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    spans: list[list[int]] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for group in matcher.get_grouped_opcodes(0):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        # Grow the context until the SEARCH text occurs once in old (and is never empty).
        while not ("".join(a[i1:i2]).strip() and old.count("".join(a[i1:i2])) == 1):
            if i1 == 0 and i2 == len(a):
                break
            if i1 > 0:
                i1, j1 = i1 - 1, j1 - 1
            if i2 < len(a):
                i2, j2 = i2 + 1, j2 + 1
        if spans and i1 <= spans[-1][1]:  # overlapping context: one edit covers both
            spans[-1][1], spans[-1][3] = max(spans[-1][1], i2), max(spans[-1][3], j2)
        else:
            spans.append([i1, i2, j1, j2])
    edits = [
        Edit(_with_newline("".join(a[i1:i2])), _with_newline("".join(b[j1:j2]))) for i1, i2, j1, j2 in spans
    ]
    try:
        if apply_edits(old, edits) == (new if new.endswith("\n") else new + "\n"):
            return edits
    except EditError:
        pass
    return [Edit(_with_newline(old), _with_newline(new))]
