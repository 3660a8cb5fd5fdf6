"""One owner per run directory: an exclusive `flock` on `run.lock` in it, taken before a run or a
`--resume` reads or writes anything there and held until the command ends (or its process dies:
the kernel drops the lock with the last descriptor, kill -9 included). The file holds the owner's
pid, for the message a second process prints. Forked children close their copy at once, so a
worker outliving a killed run never keeps its directory locked; `exec`ed ones never get it
(O_CLOEXEC). Within one process the lock is shared (tests run several commands in one process).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from kernelsmith.errors import ConfigError

LOCK_NAME = "run.lock"

_held: dict[str, list[int]] = {}  # real path of the run dir -> [descriptor, holders in this process]
_guard = threading.Lock()


def _close_in_child() -> None:
    for fd, _ in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


class RunLock:
    """This process's hold on one run directory; `release()` once the command is done with it."""

    def __init__(self, key: str):
        self._key: str | None = key

    def release(self) -> None:
        """Drop this hold; the lock goes with the process's last one."""
        with _guard:
            if self._key is None or self._key not in _held:
                self._key = None
                return
            entry = _held[self._key]
            entry[1] -= 1
            if entry[1] == 0:
                os.close(entry[0])
                del _held[self._key]
            self._key = None


def acquire(run_dir: Path, *, wait: bool = False, note: Callable[[str], None] = print) -> RunLock:
    """Lock `run_dir` (made if missing) for this process: ConfigError naming the holder's pid when
    another process holds it, or with `wait` once it lets go; ConfigError when the directory
    cannot be written."""
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(run_dir, f"cannot create the run directory ({e.strerror}); pass another "
                          "--out") from None
    key = os.path.realpath(run_dir)
    with _guard:
        if key in _held:
            _held[key][1] += 1
            return RunLock(key)
        fd = _open(run_dir / LOCK_NAME)
        try:
            _lock(fd, run_dir, wait, note)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:
            os.close(fd)
            raise ConfigError(run_dir / LOCK_NAME, f"cannot be written ({e.strerror}); make the run "
                              "directory writable (or free space), or pass another --out") from None
        except BaseException:
            os.close(fd)
            raise
        _held[key] = [fd, 1]
        return RunLock(key)


def _open(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(path, "is a symbolic link: not a lock this tool made; remove it") from None
        raise ConfigError(path.parent, f"cannot be written ({e.strerror}); make it writable, or pass "
                          "another --out") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(path, "is not a plain file: not a lock this tool made; remove it")
    return fd


def _lock(fd: int, run_dir: Path, wait: bool, note: Callable[[str], None]) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    holder = holder_pid(fd)
    if not wait:
        raise ConfigError(run_dir, f"in use by another kernelsmith process (pid {holder}); wait for it "
                          "to end, or pass --wait")
    note(f"waiting for pid {holder}, which holds {run_dir / LOCK_NAME}")
    fcntl.flock(fd, fcntl.LOCK_EX)


def holder_pid(fd: int) -> str:
    """The pid the lock file names ("unknown" when it names none yet)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else "unknown"
