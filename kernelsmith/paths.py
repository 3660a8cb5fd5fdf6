"""Where kernelsmith keeps its cache (checkouts, device measurements, state)."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path


def cache_dir() -> Path:
    """$KERNELSMITH_CACHE, else $XDG_CACHE_HOME/kernelsmith, else ~/.cache/kernelsmith."""
    explicit = os.environ.get("KERNELSMITH_CACHE")
    if explicit:
        path = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(base) / "kernelsmith"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def cache_lock(lock_path: Path):
    """An exclusive lock on a file of the cache, so two runs on one machine never build or change
    the same cached checkout at once."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
