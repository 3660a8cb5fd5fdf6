"""The replay mutator: one proposal, an earlier winner's diff applied to the CURRENT base file.

`kernelsmith optimize TARGET OP --replay RUN_DIR_OR_DIFF` re-runs the evidence for a winner on a
newer base (the bot's `/kernelsmith rebase`). It applies the old `winner/winner.diff` hunk by hunk
to today's file, never the old full file (that would revert every upstream change made since).
A diff that no longer applies is a malformed proposal whose error says which hunk failed; the
candidate that does apply goes through the normal referee, finish and run directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.runspec import Replay
from kernelsmith.search.mutators import Proposal

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A unified diff that does not apply to the file (the message names the hunk)."""


@dataclass
class Hunk:
    """One @@ block: its header, the lines it expects (context and removed) and what replaces them."""

    header: str
    old_start: int
    new_start: int
    old: list[str]
    new: list[str]
    left: list[int] = field(default_factory=lambda: [0, 0])  # lines still to read: old, new


def parse_diff(text: str) -> tuple[str | None, list[Hunk]]:
    """(the +++ path without its b/ prefix, hunks) of a one-file unified diff (git's or difflib's)."""
    path, hunks, current = None, [], None
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("+++ ") and (current is None or _hunk_done(current)):
            name = line[4:].strip().split("\t")[0]
            path = name[2:] if name.startswith(("a/", "b/")) else name
            current = None
            continue
        m = _HUNK.match(line)
        if m:
            left = [int(m.group(2) or 1), int(m.group(4) or 1)]
            current = Hunk(line.strip(), int(m.group(1)), int(m.group(3)), [], [], left)
            hunks.append(current)
            continue
        if line.startswith("\\") and current is not None:  # "\ No newline at end of file"
            prev = lines[i - 1][:1]  # it belongs to the line before it
            for side in ([current.old] if prev == "-" else [current.new] if prev == "+"
                         else [current.old, current.new]):
                if side and side[-1].endswith("\n"):
                    side[-1] = side[-1][:-1]
            continue
        if current is None or _hunk_done(current):
            continue  # headers: diff --git, index, ---
        tag, body = line[:1], line[1:]
        if tag not in (" ", "-", "+"):
            if line.strip() == "":  # a context line whose lone space was stripped in transit
                tag, body = " ", "\n"
            else:
                raise PatchError(f"{current.header}: unexpected line {line.rstrip()[:80]!r}")
        if tag in (" ", "-"):
            current.old.append(body)
            current.left[0] -= 1
        if tag in (" ", "+"):
            current.new.append(body)
            current.left[1] -= 1
    for h in hunks:
        if max(h.left) > 0:
            raise PatchError(f"{h.header}: the diff ends inside this hunk (truncated?)")
    return path, hunks


def _hunk_done(h: Hunk | None) -> bool:
    return h is not None and max(h.left) <= 0


def apply_diff(code: str, hunks: list[Hunk]) -> str:
    """Apply hunks in order: each must match exactly (any offset; the nearest match to where the diff
    says wins, as `patch` does, but with no fuzz: a changed context line is a failure)."""
    lines = code.splitlines(keepends=True)
    out: list[str] = []
    pos, offset = 0, 0
    for n, h in enumerate(hunks, 1):
        want = max(h.old_start - 1 + offset, pos) if h.old else h.old_start + offset
        at = _find(lines, h.old, pos, want)
        if at is None:
            raise PatchError(f"hunk {n} of {len(hunks)} ({h.header}) does not match the file: "
                             + _mismatch(lines, h.old, pos, want))
        out.extend(lines[pos:at])
        out.extend(h.new)
        pos = at + len(h.old)
        offset = at - (h.old_start - 1)
    out.extend(lines[pos:])
    return "".join(out)


def _find(lines: list[str], old: list[str], start: int, want: int) -> int | None:
    if not old:  # a pure insertion (new file or empty context): at the stated line
        return min(max(want, start), len(lines))
    hits = [i for i in range(start, len(lines) - len(old) + 1) if lines[i:i + len(old)] == old]
    return min(hits, key=lambda i: (abs(i - want), i)) if hits else None


def _mismatch(lines: list[str], old: list[str], start: int, want: int) -> str:
    """Where the hunk comes closest to matching, the first line that differs (for the error)."""
    spots = range(start, max(start, len(lines) - len(old)) + 1)
    def score(i: int) -> tuple[int, int]:
        return sum(a == b for a, b in zip(lines[i:i + len(old)], old, strict=False)), -abs(i - want)

    best = max(spots, key=score)
    j = next((k for k, want_line in enumerate(old) if lines[best + k:best + k + 1] != [want_line]), 0)
    found = lines[best + j].strip() if best + j < len(lines) else "the end of the file"
    return f"expected {old[j].strip()[:80]!r} at line {best + j + 1}, found {found[:80]!r}"


def reverse(hunks: list[Hunk]) -> list[Hunk]:
    """The hunks that undo these (to recognise a change the base already holds)."""
    return [Hunk(h.header, h.new_start, h.old_start, h.new, h.old) for h in hunks]


def load_replay(source: str | Path) -> Replay:
    """The diff to replay from a run directory (its winner/winner.diff) or a diff file."""
    path = Path(source).expanduser()
    if path.is_dir():
        diff_path = path / "winner" / "winner.diff"
        if not diff_path.is_file():
            raise ConfigError(diff_path, "not found: that run has no winner to replay", "--replay")
    elif path.is_file():
        diff_path = path
    else:
        raise ConfigError(path, "not found: --replay takes a run directory or a .diff file", "--replay")
    text = diff_path.read_text()
    try:
        _, hunks = parse_diff(text)
    except PatchError as e:
        raise ConfigError(diff_path, f"not a usable unified diff: {e}", "--replay") from None
    if not hunks:
        raise ConfigError(diff_path, "holds no @@ hunk: not a unified diff", "--replay")
    return Replay(source=str(diff_path.resolve()), diff=text)


class ReplayMutator:
    """Proposes exactly one candidate: the replayed diff on the current base (see module docstring)."""

    name = "replay"

    def __init__(self, task, replay: Replay):
        self.task = task
        self.source, self.diff = replay.source, replay.diff
        self.base_id: int | None = None
        self.done = False
        path, _ = parse_diff(self.diff)
        if path is not None and path != task.operator.file:
            raise ConfigError(self.source, f"patches {path}, not the operator's file "
                              f"{task.operator.file}", "--replay")

    def sync(self, rows: list[dict]) -> None:
        """Note the base row (the replayed candidate's parent) and whether it was proposed already."""
        for row in rows:
            if row["mutator"] == "base":
                self.base_id = row["id"]
            elif row["mutator"] == self.name:
                self.done = True

    def propose(self, parent, inspirations, rng, known=None) -> Proposal | None:
        """The one replay proposal (None after it): code, or a malformed proposal saying why not."""
        if self.done:
            return None
        self.done = True
        base, file = self.task.base_code, self.task.operator.file
        where = f"{file} at {self.task.base_sha[:12]}"
        prompt = f"replay of {self.source} on {where}"
        code, error = None, None
        _, hunks = parse_diff(self.diff)
        try:
            code = apply_diff(base, hunks)
        except PatchError as e:
            try:
                apply_diff(base, reverse(hunks))
                error = f"the winner no longer applies to {where}: the base already holds its change"
            except PatchError:
                error = f"the winner no longer applies to {where}: {e}"
        if code is not None and code == base:
            code, error = None, f"the replayed diff changes nothing in {where}"
        return Proposal(mutator=self.name, parent_id=self.base_id, code=code, prompt=prompt,
                        response=self.diff, error=error)
