"""The parent's handle on a worker process: inside the sandbox (kernelsmith/sandbox), a wall clock."""

from __future__ import annotations

import collections
import json
import os
import secrets
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

from kernelsmith.sandbox.launch import signal_name
from kernelsmith.sandbox.spawn import kill_group, start_candidate_python


class WorkerDied(Exception):
    """The worker exited (segfault, abort, os._exit) before answering."""


class WorkerTimeout(Exception):
    """The worker did not answer within the wall-clock limit."""


class Zygote:
    """The fork server (zygote.py): one per Referee, with the workers' environment and sandbox."""

    def __init__(self, env: dict[str, str], cwd: Path, log: Path | None = None):
        from kernelsmith import sandbox

        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # In the sandbox each worker gets a PID namespace of its own (what it starts dies with it),
        # and answers the fork itself: the kernel then tells us its pid as this namespace sees it.
        self.pidns = sandbox.enabled()
        if self.pidns:
            parent_sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        args = [str(child_sock.fileno()), *(["--pidns"] if self.pidns else [])]
        self._log = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        self.proc = start_candidate_python("kernelsmith.referee.proc.zygote", args, env, cwd,
                                           stdin=subprocess.DEVNULL, stdout=self._log,
                                           stderr=subprocess.STDOUT, pass_fds=(child_sock.fileno(),))
        child_sock.close()
        self.sock = parent_sock
        self.ready = False
        self.import_s: dict[str, float] = {}  # the zygote's seconds per import (its ready message)
        self.inner_pids: dict[int, int] = {}  # our pid of a worker -> the zygote's pid of it

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait for the zygote's first message (sent once torch and Triton are imported)."""
        if self.ready:
            return
        self.sock.settimeout(timeout)
        hello = json.loads(self.sock.recv(4096) or b"{}")
        if hello.get("ready") is not True:
            raise OSError("the zygote did not start")
        self.ready = True
        took = hello.get("import_s")
        if isinstance(took, dict):
            self.import_s = {str(k): float(v) for k, v in took.items() if isinstance(v, (int, float))}

    def _call(self, payload: dict, fds: list[int] = (), timeout: float = 30.0, creds: bool = False) -> dict:
        self.wait_ready(max(timeout, 300.0))
        self.sock.settimeout(timeout)
        socket.send_fds(self.sock, [json.dumps(payload).encode()], list(fds))
        reply, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
        if not reply:
            raise OSError("the zygote closed its socket")
        out = json.loads(reply)
        if creds:
            sender = [struct.unpack("3i", data[:12])[0] for level, kind, data in ancillary
                      if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS]
            if not sender:
                raise OSError("the forked worker's answer carried no credentials")
            out["host_pid"] = sender[0]
        return out

    def fork(self) -> tuple[int, int, int, int]:
        """A new worker: (pid, its stdin write end, its output read end, its answers read end)."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        try:
            reply = self._call({"op": "fork"}, [in_r, out_w, res_w], creds=self.pidns)
            pid = int(reply.get("host_pid") or reply["pid"])
            self.inner_pids[pid] = int(reply["pid"])
        except BaseException:
            for fd in (in_w, out_r, res_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, res_w):
                os.close(fd)
        return pid, in_w, out_r, res_r

    def status(self, pid: int) -> int | None:
        """The exit code of a forked worker (negative: killed by that signal), None while it runs."""
        try:
            return self._call({"op": "status", "pid": self.inner_pids.get(pid, pid)}).get("status")
        except (OSError, ValueError):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return -signal.SIGKILL
            except PermissionError:
                pass
            return None

    def alive(self) -> bool:
        """Whether the zygote process still runs."""
        return self.proc.poll() is None

    def close(self) -> None:
        """Stop the zygote (its workers have their own process groups and are killed separately)."""
        try:
            self.sock.close()
        except OSError:
            pass
        kill_group(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._log is not subprocess.DEVNULL:
            self._log.close()


class _Forked:
    """A Popen-like handle on a worker forked by the zygote (not our child: it reports the status)."""

    def __init__(self, pid: int, stdin_fd: int, out_fd: int, zygote: Zygote):
        self.pid = pid
        self.stdin = os.fdopen(stdin_fd, "wb")
        self.stdout = os.fdopen(out_fd, "rb")
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.05)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class WorkerProcess:
    """One worker in its own process group: forked by a zygote, else `python -m ...worker`."""

    def __init__(self, env: dict[str, str], cwd: Path, zygote: Zygote | None = None):
        self.forked = False
        self.base_cache: str | None = None  # its private Triton cache for the base (compile_cache.py)
        self.runner_cache: str | None = None  # and its runner's (the judge made it)
        if zygote is not None and zygote.alive():
            try:
                pid, in_w, out_r, res_r = zygote.fork()
            except (OSError, ValueError, KeyError):
                pass
            else:
                self.proc = _Forked(pid, in_w, out_r, zygote)
                self._read_fd = res_r
                self.fd_in_child = 3
                self.forked = True
        if not self.forked:
            read_fd, write_fd = os.pipe()
            self.proc = start_candidate_python("kernelsmith.referee.proc.worker", [], env, cwd,
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, pass_fds=(write_fd,))
            os.close(write_fd)
            self.fd_in_child = write_fd
            self._read_fd = read_fd
        self._buf = b""
        self.log: collections.deque[str] = collections.deque(maxlen=300)
        self._drain = threading.Thread(target=self._drain_output, daemon=True)
        self._drain.start()

    def _drain_output(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            self.log.append(raw.decode(errors="replace").rstrip("\n"))

    def log_tail(self, n: int = 60) -> str:
        """The last lines the worker printed."""
        return "\n".join(list(self.log)[-n:])

    def send(self, msg: dict) -> str:
        """Send one request; returns the nonce its answer must carry."""
        nonce = secrets.token_hex(16)
        line = json.dumps({**msg, "nonce": nonce}) + "\n"
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(self._death_note()) from e
        return nonce

    def wait(self, nonce: str, timeout: float) -> dict:
        """Wait for the answer to the request sent with `nonce`; WorkerTimeout / WorkerDied otherwise."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout(f"no answer within {timeout:.0f} s")
            ready, _, _ = select.select([self._read_fd], [], [], min(left, 1.0))
            if not ready:
                if self.proc.poll() is not None:
                    raise WorkerDied(self._death_note())
                continue
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                self.proc.wait(timeout=5)
                raise WorkerDied(self._death_note())
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\n")
        reply = json.loads(raw)
        if reply.get("nonce") != nonce:
            raise WorkerDied("the worker's answer did not carry this request's nonce (tampered protocol)")
        return reply

    def request(self, msg: dict, timeout: float) -> dict:
        """Send one request and wait for its answer."""
        return self.wait(self.send(msg), timeout)

    def _death_note(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            how = f"was killed by {signal_name(-code)}"
        else:
            how = f"exited with status {code}"
        self._drain.join(timeout=2)
        return f"the judge (worker process {self.proc.pid}) {how}\n{self.log_tail()}"

    def kill(self) -> None:
        """Kill the worker's whole process group (anything it started dies with it)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.proc.pid)  # stragglers that outlived the leader
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self._read_fd)
        except OSError:
            pass

    def close(self, timeout: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not."""
        try:
            self.proc.stdin.write(b'{"op": "exit"}\n')
            self.proc.stdin.flush()
            self.proc.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        self.kill()
