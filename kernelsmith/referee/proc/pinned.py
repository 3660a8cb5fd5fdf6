"""The files every new worker reads from disk, pinned to their content at the Referee's start.

A candidate that rewrites the base file, a sibling module it imports, the harness (its reference
and inputs) or a stub is rejected (`file_access`), but the file would stay rewritten: every later
worker would load the slowed base (and its A/A copy, so the control stays clean) or a reference
that agrees with a wrong kernel. The parent, which never runs candidate code, keeps their bytes and
puts back any that changed before a new worker starts, and again once it is ready.
"""

from __future__ import annotations

import os
import shutil
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
        # Python prefers a package folder, an extension module or a __pycache__ .pyc (checked only
        # against the source's mtime and size) to a module's .py: what appears beside a pinned module
        # under its name after the start is removed with the rest of the damage.
        self.stems: dict[Path, set[str]] = {}
        for p in self.files:
            if p.suffix == ".py":
                self.stems.setdefault(p.parent, set()).add(p.stem)
        self.listing = {d: set(os.listdir(d)) for d in self.stems}
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

    def shadows(self) -> list[Path]:
        """New entries that Python would import instead of a pinned module, and __pycache__ folders."""
        out = []
        for folder, stems in self.stems.items():
            try:
                names = set(os.listdir(folder))
            except OSError:
                continue
            for name in sorted(names):
                path = folder / name
                if name == "__pycache__":
                    if any(path.glob(f"{stem}.*.pyc") for stem in stems):
                        out.append(path)
                elif name not in self.listing[folder] and name.split(".")[0] in stems \
                        and not name.endswith(".kernelsmith-restore"):
                    out.append(path)
        return out

    def restore(self) -> list[str]:
        """Put back every changed file (atomically, replacing a symlink rather than following it)
        and remove what would shadow a pinned module."""
        fixed = []
        for path in self.shadows():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            if path.name != "__pycache__":
                fixed.append(str(path))
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
    """The base file (as the task read it), the Python files beside it, the harness and the Python
    files beside it (a harness may import them relatively: harness/model.py), and the stubs."""
    base = (task.root / task.operator.file).resolve()
    harness = Path(task.operator.harness)
    paths = [base, *sorted(base.parent.glob("*.py")), harness, *sorted(harness.parent.glob("*.py"))]
    paths += [Path(p) for p in (task.target.stubs or {}).values()]
    return PinnedFiles(paths, {base: task.base_code.encode()} if task.base_code else None)
