"""Where kernelsmith keeps its cache (checkouts, device measurements, state)."""

from __future__ import annotations

import os
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
