"""Triton's on-disk kernel cache, split so the base never loads a binary a candidate could have written.

Candidates compile with the shared cache folder (where the CPU precompiler's output lands), so any
candidate, in a worker or in a precompile child that runs candidate code without integrity checks,
can plant a file under any key there, the base kernel's included. A worker replaced after a
rejection would then load that binary for the base and the A/A copy (same source, same key), and
every later candidate would look faster behind a clean A/A control. So each worker compiles the
base and its A/A copy in a fresh private folder made at worker start, before any candidate code runs
in it, and `base()` switches Triton to that folder around the referee's own base/A-A calls that can
compile (never inside a timed region: a switch costs a few attribute writes).

Triton 3.6 to 3.9 read `triton.knobs.cache.dir` (TRITON_CACHE_DIR) when a kernel compiles (each
FileCacheManager reads it), so switching it between calls takes effect at once. Under the
interpreter nothing is compiled and the switch is harmless.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

try:
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - a Triton without knobs reads the environment variable
    _knobs = None

ENV = "TRITON_CACHE_DIR"
BASE_SEED_LIMIT = 64 << 20  # bytes of base binaries handed from worker to worker (more: compile)


def cache_dir() -> str:
    """The folder Triton compiles into right now."""
    if _knobs is not None:
        return str(_knobs.cache.dir)
    return os.environ.get(ENV) or os.path.join(os.path.expanduser("~"), ".triton", "cache")


def set_cache_dir(path: str) -> None:
    """Make Triton compile into `path` from the next compilation on."""
    if _knobs is not None:
        _knobs.cache.dir = str(path)  # also sets TRITON_CACHE_DIR, so the two never disagree
    else:  # pragma: no cover
        os.environ[ENV] = str(path)


def read_folder(path: str | Path, limit: int) -> dict[str, bytes] | None:
    """Every plain file under `path` as {relative path: bytes}; None when they exceed `limit` bytes.
    Links and hardlinks are skipped and no link is followed (safefs): candidate code may have run
    in a process that could write the folder's parent."""
    from kernelsmith.safefs import UnsafePath, open_dir, read_at

    out, total = {}, 0
    try:
        top = open_dir(path)
    except (OSError, UnsafePath):
        return out
    try:
        for folder, _dirs, files, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in sorted(files):
                try:
                    data = read_at(dir_fd, name)
                except (OSError, UnsafePath):
                    continue
                total += len(data)
                if total > limit:
                    return None
                out[os.path.normpath(os.path.join(folder, name))] = data
    finally:
        os.close(top)
    return out


def make_private(parent: Path) -> Path:
    """A new, empty folder for this worker's base kernels (mode 0700, random name)."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="base-", dir=parent))


class CompileCaches:
    """The shared candidate cache (as found at worker start) and this worker's private base cache."""

    def __init__(self, private: Path, shared: str | None = None):
        self.shared = shared or cache_dir()
        self.private = Path(private)
        if os.path.realpath(self.private) == os.path.realpath(self.shared):
            raise ValueError("the base's private Triton cache must differ from the shared one")
        if self.private.exists() and any(self.private.iterdir()):
            # Written before this worker ran anything of its own: nothing in it can be trusted.
            shutil.rmtree(self.private)
        self.private.mkdir(parents=True, exist_ok=True)
        self.current = self.shared  # where candidates compile now (see fresh())
        set_cache_dir(self.shared)

    def seed(self, files: dict[str, bytes]) -> int:
        """Put base binaries into the private folder before anything compiles (returns the count).

        They come from the parent's memory, copied from an earlier worker's private folder at the
        moment it had run nothing but the base, so they are as trustworthy as compiling here.
        """
        root = os.path.realpath(self.private)
        n = 0
        for rel, data in files.items():
            path = os.path.realpath(os.path.join(root, rel))
            if not path.startswith(root + os.sep):
                continue  # only ever paths inside the folder
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            n += 1
        return n

    @contextmanager
    def base(self):
        """Compile the base / A-A kernels of this block in the private folder, then switch back."""
        saved_manager = None
        if _knobs is not None:
            # A custom cache manager (TRITON_CACHE_MANAGER, settable by candidate code through the
            # environment) could ignore the folder; the base always uses Triton's file cache.
            saved_manager = _knobs.cache.__dict__.get("manager_class", _MISSING)
            _knobs.cache.__dict__["manager_class"] = None
        set_cache_dir(str(self.private))
        try:
            yield self.private
        finally:
            set_cache_dir(self.current)
            if _knobs is not None:
                if saved_manager is _MISSING:
                    _knobs.cache.__dict__.pop("manager_class", None)
                else:
                    _knobs.cache.__dict__["manager_class"] = saved_manager

    @contextmanager
    def fresh(self):
        """Compile candidates of this block in a new, empty folder (deleted afterwards), so what
        runs is compiled from the candidate's source here, never a binary found on disk."""
        path = Path(tempfile.mkdtemp(prefix="fresh-", dir=self.private.parent))
        self.current = str(path)
        set_cache_dir(self.current)
        try:
            yield path
        finally:
            self.current = self.shared
            set_cache_dir(self.shared)
            shutil.rmtree(path, ignore_errors=True)

    def remove(self) -> None:
        """Delete the private folder (the worker is done with it)."""
        shutil.rmtree(self.private, ignore_errors=True)


_MISSING = object()
