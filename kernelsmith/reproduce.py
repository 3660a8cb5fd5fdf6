"""Commands printed for people to paste (report.md's Reproduce lines, scan's and `harness new`'s
suggestions): arguments that work from the project's folder, never a runner's absolute paths."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

_PLACEHOLDER = re.compile(r"<[^<>\n]+>(/[A-Za-z0-9_./-]*)?\Z")  # `<run dir>/winner/x.py` too


def target_arg(yaml: str | os.PathLike) -> str:
    """The TARGET argument that finds `yaml` when pasted in the repository holding it: its name
    when it lies in that repository's `targets/` folder (the default), else its path relative to
    the repository; a `<path to NAME.yaml>` placeholder when no repository holds it."""
    path = Path(yaml)
    root = next((p for p in path.parents if (p / ".git").exists()), None)
    rel = path.relative_to(root) if root is not None else None
    if (rel.parent if rel is not None else Path(path.parent.name)) == Path("targets"):
        return path.stem
    return rel.as_posix() if rel is not None else f"<path to {path.name}>"


def checkout_placeholder(repo: str | None) -> str:
    """`<path to your NAME checkout>` for a `--checkout` that was a local folder of the run's machine."""
    name = (repo or "").rsplit("/", 1)[-1] or "target"
    return f"<path to your {name} checkout>"


def local_path(path: str | os.PathLike) -> str:
    """A local path as the person who typed it can paste it: relative to the current folder
    when inside it, else absolute."""
    p = Path(path).resolve()
    try:
        return p.relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return str(p)


def join(words: list[str]) -> str:
    """A shell line: words quoted as needed, `<…>` placeholders left bare for the reader to fill in."""
    return " ".join(w if _PLACEHOLDER.match(w) else shlex.quote(w) for w in words)


def harness_line(action: str, op: str, target: str, checkout: str | None = None,
                 targets: str | None = None) -> str:
    """`kernelsmith [--targets DIR] harness ACTION TARGET OP [--checkout DIR]`, as a shell line."""
    return join(["kernelsmith", *(["--targets", targets] if targets else []), "harness", action, target, op,
                 *(["--checkout", checkout] if checkout else [])])
