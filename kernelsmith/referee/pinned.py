"""The files every new worker reads from disk, pinned to their content at the Referee's start.

A candidate that rewrites the base file, a sibling module it imports, the harness (its reference
and inputs) or a stub is rejected (`file_access`), but the file would stay rewritten: every later
worker would load the slowed base (and its A/A copy, so the control stays clean) or a reference
that agrees with a wrong kernel. The parent, which never runs candidate code, keeps their bytes and
puts back any that changed before a new worker starts, and again once it is ready.
"""

from __future__ import annotations

import os
from pathlib import Path


class PinnedFiles:
    """Bytes and modes of a set of files, restorable."""

    def __init__(self, paths: list[Path], content: dict[Path, bytes] | None = None):
        self.files: dict[Path, tuple[bytes, int]] = {}
        for p in paths:
            p = Path(p)
            if p.is_file() and not p.is_symlink():
                self.files[p] = (p.read_bytes(), p.stat().st_mode & 0o777)
        for p, data in (content or {}).items():
            if Path(p) in self.files:
                self.files[Path(p)] = (data, self.files[Path(p)][1])
        self.restored: list[str] = []

    def changed(self) -> list[Path]:
        """The pinned files whose content (or kind: a symlink now) differs."""
        out = []
        for p, (data, _) in self.files.items():
            try:
                same = not p.is_symlink() and p.read_bytes() == data
            except OSError:
                same = False
            if not same:
                out.append(p)
        return out

    def restore(self) -> list[str]:
        """Put back every changed file (atomically, replacing a symlink rather than following it)."""
        fixed = []
        for p in self.changed():
            data, mode = self.files[p]
            tmp = p.with_name(f".{p.name}.kernelsmith-restore")
            tmp.write_bytes(data)
            os.chmod(tmp, mode)
            os.replace(tmp, p)
            fixed.append(str(p))
        self.restored += fixed
        return fixed


def task_files(task) -> PinnedFiles:
    """The base file (as the task read it), the Python files beside it, the harness and the stubs."""
    base = (task.root / task.operator.file).resolve()
    paths = [base, *sorted(base.parent.glob("*.py")), Path(task.operator.harness)]
    paths += [Path(p) for p in (task.target.stubs or {}).values()]
    return PinnedFiles(paths, {base: task.base_code.encode()} if task.base_code else None)
