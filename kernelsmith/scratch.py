"""Folders untrusted code writes into, removed without ever following a link it left there.

`TemporaryDirectory.cleanup` answers a permission error by chmodding the failing path, following
a link (CPython before 3.11.8 and 3.12.2; 3.11.7 on the development machine): a candidate, a
target's setup or a harness could leave a link to a file outside and make the removal fail, and the
file became mode 0o700. Here directories are made writable under their parent's descriptor
without following links, then `shutil.rmtree` unlinks links without following them.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager


def remove_tree(path: str, tries: int = 5) -> None:
    """Remove the folder at `path` without following links in it. Processes killed a moment ago may
    still add a file ("Directory not empty"): try again shortly, and leave what cannot be removed
    rather than fail."""
    for _ in range(tries):
        _dirs_writable(path)
        try:
            shutil.rmtree(path)
            return
        except OSError:
            if not os.path.lexists(path):
                return
            time.sleep(0.2)
    shutil.rmtree(path, ignore_errors=True)


class ScratchDir:
    """A new folder under the temporary directory (`name`), removed with `remove_tree` by `remove()`,
    or when the object is collected or the interpreter exits, whichever comes first (where
    TemporaryDirectory would call its own cleanup)."""

    def __init__(self, prefix: str, dir: str | None = None, *, owned: bool = False):
        # owned: the creating process's pid goes into the name, so a later run can tell a folder
        # left by a killed process (remove_orphans) from one still in use.
        self.name = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-" if owned else prefix, dir=dir)
        self._finalizer = weakref.finalize(self, remove_tree, self.name)

    def remove(self, tries: int = 5) -> None:
        """Remove the folder now (once; later calls do nothing)."""
        if self._finalizer.detach() is not None:
            remove_tree(self.name, tries)


def remove_orphans(prefix: str, dir: str | None = None) -> list[str]:
    """Remove the `owned` ScratchDirs named `<prefix><pid>-…` whose process is gone (a kill -9
    leaves them, holding candidate sources), with `remove_tree`; their paths. A folder whose pid is
    alive, or that names no pid, is left alone."""
    top = dir or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(top)
    except OSError:
        return removed
    for name in names:
        pid, sep, _ = name[len(prefix):].partition("-") if name.startswith(prefix) else ("", "", "")
        path = os.path.join(top, name)
        if not (sep and pid.isdigit()) or _alive(int(pid)) or not _plain_dir(path):
            continue
        remove_tree(path)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def _plain_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A ScratchDir's path for the block, removed on leaving it."""
    folder = ScratchDir(prefix)
    try:
        yield folder.name
    finally:
        folder.remove()


def _dirs_writable(top: str) -> None:
    """Give every directory under `top` (itself too) its owner's full rights, each looked up under
    its parent's descriptor without following links, so that a link is never chmodded through."""
    _own_dir(top, None)
    try:
        walk = os.fwalk(top)  # top-down: a child is fixed before the walk descends into it
        for _root, dirs, _files, root_fd in walk:
            for d in dirs:
                _own_dir(d, root_fd)
    except OSError:
        pass


def _own_dir(path: str, dir_fd: int | None) -> None:
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
            os.chmod(path, 0o700, dir_fd=dir_fd)
    except OSError:
        pass
