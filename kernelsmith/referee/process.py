"""The parent's handle on a worker process: scrubbed environment, no network, a wall clock."""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_DROP_PREFIXES = ("GITHUB_", "KERNELSMITH_", "OPENAI_", "ACTIONS_", "ANTHROPIC_", "AWS_", "AZURE_",
                  "GOOGLE_", "HF_", "HUGGING", "GH_", "SSH_", "GPG_", "NPM_", "PYPI_", "TWINE_")
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|PRIVATE|ACCESS_?KEY"
                          r"|AUTH|COOKIE|SESSION|_KEY$|^KEY", re.I)
_SECRET_VALUE = re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|sk-[A-Za-z0-9_-]{16,}"
                           r"|-----BEGIN [A-Z ]*PRIVATE KEY|xox[abprs]-|AKIA[0-9A-Z]{16}"
                           r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")


def scrubbed_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without GITHUB_*/KERNELSMITH_*/OPENAI_* or anything that looks like a secret."""
    env = dict(os.environ if base is None else base)
    out = {}
    for k, v in env.items():
        if k.upper().startswith(_DROP_PREFIXES) or _SECRET_NAME.search(k) or _SECRET_VALUE.search(v or ""):
            continue
        out[k] = v
    return out


@functools.lru_cache(maxsize=1)
def netns_prefix() -> tuple[str, ...]:
    """`unshare -rn` when this OS lets an unprivileged user drop into a network namespace."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    try:
        ok = subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (exe, "-rn") if ok else ()


class WorkerDied(Exception):
    """The worker exited (segfault, abort, os._exit) before answering."""


class WorkerTimeout(Exception):
    """The worker did not answer within the wall-clock limit."""


class WorkerProcess:
    """One worker: `python -m kernelsmith.referee.worker` in its own process group."""

    def __init__(self, env: dict[str, str], cwd: Path, network: bool = False):
        read_fd, write_fd = os.pipe()
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env = dict(env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [*(() if network else netns_prefix()), sys.executable, "-m", "kernelsmith.referee.worker"]
        self.sandboxed = bool(netns_prefix()) and not network
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env, cwd=str(cwd),
                                     start_new_session=True)
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
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        self._drain.join(timeout=2)
        return f"worker process {how}\n{self.log_tail()}"

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
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers that outlived the leader
        except (ProcessLookupError, PermissionError):
            pass
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
