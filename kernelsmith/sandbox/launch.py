"""The sandbox launcher: `python -I -S launch.py SPEC_JSON COMMAND...` (standard library only).

It runs COMMAND in new user, mount, PID and network namespaces:
  L (this process, outside): unshare(user|mount|net|pid), map root to the caller's uid, fork;
  C (pid 1 inside, root of the new user namespace): the spec's `cover` folders (/run, ...)
    emptied (an empty tmpfs, its `keep` paths bound back), every mount read-only except the spec's
    writable folders, a private /dev/shm, credential files hidden, a fresh /proc (no process
    outside is visible, so no ancestor's environ can be read), loopback up; then C drops into a
    nested user namespace (no capability over those mounts any more, so they cannot be undone),
    sets no_new_privs, the memory cap (`memory_bytes`) and, unless `unix_sockets`, the seccomp
    filter (seccomp.py), and forks
  T: the command.
C exits when T exits, and the kernel then kills every process left in the namespace (a
double-forked one too); C dies with L (PR_SET_PDEATHSIG), and L kills C when its own parent
goes. L reproduces T's exit status (a signal as the same signal, with a line on stderr naming it).
With SPEC_JSON {"probe": true} it builds the sandbox, runs nothing and reports "ok".
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import signal
import socket
import struct
import sys
import time

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOSYMFOLLOW, MS_NOATIME, MS_NODIRATIME = 32, 256, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 4096, 16384, 1 << 18, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_FLAG_OPTS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
              "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "nosymfollow": MS_NOSYMFOLLOW}

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxSetupError(Exception):
    """One step of building the sandbox failed; the message names the step."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise SandboxSetupError(f"{what}: {errno.errorcode.get(e, e)} ({os.strerror(e)})")


def unshare(flags: int, what: str) -> None:
    """unshare(2): os.unshare on Python >= 3.12, libc through ctypes before."""
    if hasattr(os, "unshare"):
        try:
            os.unshare(flags)
        except OSError as e:
            name = errno.errorcode.get(e.errno, e.errno)
            raise SandboxSetupError(f"{what}: {name} ({e.strerror})") from None
        return
    _check(_libc.unshare(ctypes.c_int(flags)), what)


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = (lambda s: None if s is None else os.fsencode(s))
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def prctl(option: int, value: int) -> None:
    """prctl(2) with one argument."""
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def map_ids(inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int) -> None:
    """Map one uid and one gid of the new user namespace (the unprivileged way: setgroups denied)."""
    try:
        _write("/proc/self/setgroups", "deny")
    except FileNotFoundError:  # kernels before 3.19
        pass
    try:
        _write("/proc/self/uid_map", f"{inside_uid} {outside_uid} 1\n")
        _write("/proc/self/gid_map", f"{inside_gid} {outside_gid} 1\n")
    except OSError as e:
        raise SandboxSetupError(f"writing the user namespace's id maps: {e}") from None


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _mounts() -> list[tuple[str, set[str], str]]:
    """(mount point, per-mount options, file system type) of every mount in this mount namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index("-") + 1] if "-" in fields else ""
            out.append((_unescape(fields[4]), set(fields[5].split(",")), fstype))
    return out


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _remount_flags(opts: set[str]) -> int:
    flags = 0
    for name, bit in _FLAG_OPTS.items():
        if name in opts:
            flags |= bit
    if not opts & {"noatime", "relatime"}:
        flags |= MS_STRICTATIME  # an atime flag locked by the outer namespace must be kept as it is
    return flags


def _read_only_all(writable: list[str]) -> None:
    for mp, opts, fstype in _mounts():
        if "ro" in opts or _under(mp, "/proc") or any(_under(mp, w) for w in writable):
            continue
        if fstype == "autofs":  # an automount trigger holds no files itself (and remounting it can fail)
            continue
        try:
            _mount(None, mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _remount_flags(opts))
        except SandboxSetupError as e:
            if not os.path.exists(mp):  # hidden under another mount or not reachable: nothing to write
                continue
            if "EACCES" in str(e):  # behind a folder this uid cannot enter: unreachable inside too
                continue
            raise SandboxSetupError(f"making {mp} read-only failed ({e})") from None


def _loopback_up() -> None:
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(s.fileno(), siocgifflags, req))[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sh14x", b"lo", flags | iff_up))


def _cover(top: str, keep: list[str]) -> None:
    """An empty tmpfs over the folder `top` (what listens in it, Docker's or D-Bus's socket, is
    gone), with the `keep` paths under it bound back in from descriptors opened before."""
    kept = []
    for k in sorted(keep, key=len):
        if _under(k, top) and k != top and not any(_under(k, o) for o, _ in kept):
            try:
                kept.append((k, os.open(k, os.O_PATH | os.O_CLOEXEC)))
            except OSError:
                continue  # gone or unreachable: nothing to keep
    _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for k, fd in kept:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(k, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(k), exist_ok=True)
            os.close(os.open(k, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        _mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC)
        os.close(fd)


def hide_folders(spec: dict, writable: list[str]) -> None:
    """Cover the spec's `cover` folders (resolved: /var/run is /run on most systems) with empty
    tmpfs, keeping the writable folders, the cwd and the spec's `keep` paths under them."""
    keep = sorted({os.path.realpath(k) for k in [*writable, os.getcwd(), *spec.get("keep", [])]})
    for top in sorted({os.path.realpath(c) for c in spec.get("cover", [])}):
        if not os.path.isdir(top) or top == "/" or any(_under(top, k) for k in keep):
            continue  # a kept path at or above it: it cannot be covered without hiding that
        _cover(top, keep)


def build_mounts(spec: dict) -> None:
    """In C: the covered folders emptied, read-only everything, then the writable binds, scratch,
    hidden files and a fresh /proc."""
    writable = sorted({os.path.realpath(w) for w in spec.get("writable", []) if os.path.exists(w)}, key=len)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing here propagates back out
    hide_folders(spec, writable)
    for w in writable:
        _mount(w, w, None, MS_BIND | MS_REC)
    _read_only_all(writable)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for h in spec.get("hide", []):
        if os.path.isdir(h) and not os.path.islink(h):
            _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k")
        elif os.path.exists(h) and not os.path.islink(h):  # a file or a socket (ssh-agent's)
            _mount("/dev/null", h, None, MS_BIND)
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except SandboxSetupError as e:
        raise SandboxSetupError(f"mounting a fresh /proc for the new PID namespace was refused ({e}); "
                                "a container whose own /proc has masked entries does this") from None
    try:
        _loopback_up()
    except OSError:
        pass  # no loopback inside: still no network


def _sibling(name: str):
    """A module next to this file, loaded by path (launch.py runs as a script under -I)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    found = importlib.util.spec_from_file_location(f"_kernelsmith_sandbox_{name}", path)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def limit_memory(cap: int | None) -> None:
    """RLIMIT_DATA (heap and private writable mappings; not the address space, which CUDA
    reserves by the terabyte) for this process and everything it starts."""
    if cap:
        import resource

        try:
            resource.setrlimit(resource.RLIMIT_DATA, (int(cap), int(cap)))
        except (OSError, ValueError) as e:
            raise SandboxSetupError(f"setrlimit(RLIMIT_DATA, {cap}): {e}") from None


def _close_fds_except(keep: set[int]) -> None:
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _report(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode()[:4000])
    except OSError:
        pass


def _init(spec: dict, cmd: list[str], status_w: int, uid: int, gid: int) -> None:
    """C: pid 1 of the new PID namespace. Never returns."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        cwd = os.getcwd()
        # Loaded before the mounts: this file's folder may lie under a /tmp they empty.
        seccomp = _sibling("seccomp") if spec.get("unix_sockets") is False else None
        build_mounts(spec)
        unshare(CLONE_NEWUSER, "unshare(CLONE_NEWUSER) for dropping capabilities")
        map_ids(uid, 0, gid, 0)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        os.chdir(cwd)  # through the new mounts (the old cwd still named the writable lower mount)
        limit_memory(spec.get("memory_bytes"))
        if seccomp is not None:
            seccomp.install()
    except (SandboxSetupError, OSError) as e:
        _report(status_w, f"error {e}")
        os._exit(1)
    if spec.get("probe"):
        _report(status_w, "exit 0")
        os._exit(0)
    os.set_inheritable(status_w, False)
    child = os.fork()
    if child == 0:
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            print(f"kernelsmith sandbox: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
        os._exit(127)
    _close_fds_except({status_w})
    while True:  # pid 1 reaps every orphan until the command itself ends
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(status)
    _report(status_w, f"signal {-code}" if code < 0 else f"exit {code}")
    os._exit(0)


def signal_name(sig: int) -> str:
    """SIGKILL for 9; "signal N" for a number without a name."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _relay(status: str, what: str, err: int) -> None:
    """Exit as the command did: an exit status as it is, a signal as the same signal (after one
    line on stderr naming the process and the signal)."""
    kind, _, value = status.partition(" ")
    if kind != "signal":
        os._exit(int(value) if kind == "exit" else 125)
    sig = int(value)
    _report(err, f"kernelsmith sandbox: {what} was killed by {signal_name(sig)}\n")
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught: no handler to reset
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), sig)
    time.sleep(1)  # a signal whose default is to be ignored: the shell's convention instead
    os._exit(128 + sig)


def _shown(cmd: list[str]) -> str:
    """The command in a message: its program and first arguments, cut short."""
    text = " ".join(cmd[:4])
    return repr(text if len(text) <= 120 else text[:117] + "...")


def main(argv: list[str]) -> None:
    """L: unshare, fork C, wait for it, exit as the command did."""
    spec = json.loads(argv[1])
    cmd = argv[2:]
    uid, gid = os.geteuid(), os.getegid()
    try:
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID,
                "unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWPID)")
        map_ids(0, uid, 0, gid)
    except SandboxSetupError as e:
        print(f"kernelsmith sandbox: error {e}", file=sys.stderr)
        os._exit(125)
    status_r, status_w = os.pipe()
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # waited for below, never lost
    c = os.fork()
    if c == 0:
        os.close(status_r)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        _init(spec, cmd, status_w, uid, gid)
    os.close(status_w)
    err = os.dup(2)
    os.set_inheritable(err, False)
    _close_fds_except({status_r, err})  # the command's pipes must reach EOF when it ends, not when L does

    def stop(signum, frame):
        os.kill(c, signal.SIGKILL)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    while True:
        pid, c_status = os.waitpid(c, os.WNOHANG)
        if pid:
            break
        if os.getppid() != parent:  # our caller died: so does everything we started
            os.kill(c, signal.SIGKILL)
        signal.sigtimedwait([signal.SIGCHLD], 0.5)
    status = os.read(status_r, 4096).decode(errors="replace")
    if status.startswith("error "):
        os.write(err, f"kernelsmith sandbox: {status}\n".encode())
        os._exit(125)
    if status:
        _relay(status, f"the sandboxed command {_shown(cmd)}", err)
    code = os.waitstatus_to_exitcode(c_status)  # the sandbox's init itself died before reporting
    _relay(f"signal {-code}" if code < 0 else "signal 9", f"the sandbox's init process (pid {c})", err)


def fork_into_pid_namespace() -> None:
    """In a single-threaded process inside the sandbox: the rest of this process runs as pid 1 of
    a PID namespace of its own, so whatever it starts dies with it. The original process stays
    as a waiting parent that exits with the child's status (a signal as the same signal)."""
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, "unshare(user|pid|mount) for a worker")
    map_ids(uid, uid, gid, gid)
    child = os.fork()
    if child == 0:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:  # its own /proc: its pid there is os.getpid(), and no sibling worker is visible
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except SandboxSetupError:
            pass  # the sandbox's /proc stays: still nothing outside the sandbox is visible
        return
    _close_fds_except({2})
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    _relay(f"signal {-code}" if code < 0 else f"exit {code}",
           f"the worker forked by process {os.getpid()} (pid 1 of its own PID namespace)", 2)


if __name__ == "__main__":
    main(sys.argv)
