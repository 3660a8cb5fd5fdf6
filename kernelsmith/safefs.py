"""Files a trusted process touches where untrusted code could have been: never through a link.

Every write, read and copy by a trusted process (the referee's parent, verify, the search, the
bot) into a folder that candidate code, a target's `setup` or its tests could write goes through
here. Paths are walked one component at a time with `O_NOFOLLOW` under the previous component's
descriptor, so a symlink planted anywhere on the way is refused instead of followed; files are
written under a fresh name (`O_EXCL`) and renamed over the target, which replaces a planted link
or hardlink instead of writing through it; reads refuse links, hardlinks and non-regular files.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from kernelsmith.errors import KernelsmithError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(KernelsmithError):
    """A path a trusted process was to use holds a link, a hardlink or a non-regular file."""


def _parts(path: str | os.PathLike) -> tuple[str, tuple[str, ...]]:
    p = Path(os.path.abspath(os.fspath(path)))
    return p.anchor, p.parts[1:]


def open_dir(path: str | os.PathLike, *, create: bool = False, mode: int = 0o700) -> int:
    """A descriptor of the folder `path`, walked from `/` without following any link (`create`:
    missing folders are made with `mode`). UnsafePath where a component is a link or not a folder."""
    anchor, parts = _parts(path)
    top = os.open(anchor, _DIR)
    try:
        return open_subdir(top, parts, create=create, mode=mode) if parts else os.dup(top)
    finally:
        os.close(top)


def _open_child_dir(fd: int, name: str, shown: tuple[str, ...]) -> int:
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{'/'.join(shown)}: a symlink or not a folder; refused") from None
        raise


def relative_parts(rel: str | os.PathLike) -> tuple[str, ...]:
    """The components of a relative path that stays inside its folder; UnsafePath otherwise."""
    p = PurePosixPath(os.fspath(rel))
    if p.is_absolute() or not p.parts or any(x in ("", ".", "..") for x in p.parts):
        raise UnsafePath(f"{rel}: not a path inside its folder; refused")
    return p.parts


def open_subdir(root_fd: int, rel: str | os.PathLike | tuple[str, ...], *, create: bool = False,
                mode: int = 0o700) -> int:
    """A descriptor of `root_fd/rel` (a folder), walked without following links."""
    parts = rel if isinstance(rel, tuple) else relative_parts(rel)
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts):
            if create:
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = _open_child_dir(fd, name, parts[:i + 1])
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_at(dir_fd: int, name: str, data: bytes | str, *, mode: int = 0o644) -> None:
    """Write `data` to `dir_fd/name` (one path component): a new file under a private name, then
    renamed over `name`, so a link or hardlink planted at `name` is replaced, never written through."""
    if "/" in name or name in ("", ".", ".."):
        raise UnsafePath(f"{name!r}: not a file name; refused")
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except IsADirectoryError:
        os.unlink(tmp, dir_fd=dir_fd)
        raise UnsafePath(f"{name}: a folder stands where a file is to be written; refused") from None
    except BaseException:
        os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_file(path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644,
               create_dirs: bool = True) -> None:
    """Write `data` at `path` without following a link anywhere on the way (see write_at)."""
    p = Path(os.path.abspath(os.fspath(path)))
    fd = open_dir(p.parent, create=create_dirs)
    try:
        write_at(fd, p.name, data, mode=mode)
    finally:
        os.close(fd)


def read_at(dir_fd: int, name: str, limit: int | None = None) -> bytes:
    """The bytes of the plain file `dir_fd/name`: a link, a hardlink, a non-regular file or more
    than `limit` bytes is UnsafePath; FileNotFoundError when absent."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"{name}: a symlink; refused (plain files only)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{name}: not a regular file; refused")
        if st.st_nlink != 1:
            raise UnsafePath(f"{name}: a hardlink ({st.st_nlink} links); refused")
        if limit is not None and st.st_size > limit:
            raise UnsafePath(f"{name}: {st.st_size} bytes, over the {limit}-byte limit; refused")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if limit is not None and total > limit:
                raise UnsafePath(f"{name}: over the {limit}-byte limit; refused")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of the plain file at `path`, walked from `/` without following links (read_at)."""
    p = Path(os.path.abspath(os.fspath(path)))
    fd = open_dir(p.parent)
    try:
        return read_at(fd, p.name, limit)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, limit: int | None = None) -> str:
    """read_file decoded as UTF-8."""
    return read_file(path, limit).decode("utf-8")


def copy_file(src: str | os.PathLike, dst: str | os.PathLike, *, mode: int = 0o644) -> None:
    """Copy the plain file `src` to `dst`, neither side through a link."""
    write_file(dst, read_file(src), mode=mode)


def private_dir(path: str | os.PathLike, mode: int = 0o700) -> Path:
    """Make the folder `path` anew (it must not exist) and return it: made by the trusted side, so
    nothing untrusted code planted earlier can stand in it."""
    p = Path(os.path.abspath(os.fspath(path)))
    fd = open_dir(p.parent, create=True)
    try:
        os.mkdir(p.name, mode, dir_fd=fd)
    finally:
        os.close(fd)
    return p
