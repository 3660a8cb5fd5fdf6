"""Every child process kernelsmith starts goes through here: its environment, its sandbox profile,
a process group of its own (a kill takes whatever it started), how it ends, and a protocol stdout
that nothing its code prints can pass for.

Kinds of child: referee workers, their fork server and compile processes ("candidate"), harness
probes and facts ("harness"), a target's setup ("setup"), its tests and benchmarks ("tests"), and
the LLM broker (no profile: it is trusted and holds the model's key, and nothing untrusted runs in it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kernelsmith.pycmd import PACKAGE_PARENT, module_argv, python_path
from kernelsmith.sandbox import wrap


def device_env(env: dict[str, str], device: str | None, gpu: int | None = None) -> dict[str, str]:
    """`env` for kernels on `device`: "interpret" runs them under the Triton interpreter with no GPU
    visible, "cuda" (or any device) on the GPU (`gpu`: the one visible); None leaves `env` as it is."""
    env = dict(env)
    if device is None:
        return env
    env.pop("TRITON_INTERPRET", None)
    if device == "interpret":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
        # A referee runs several torch processes at once (judge, runner, oracle, a spare): with a
        # thread per core in each, OpenMP's threads spin at the end of every parallel op while the
        # others wait for a core. The interpreter's tensors are small; one thread each is faster.
        env.setdefault("OMP_NUM_THREADS", "1")
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def python_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a kernelsmith Python child: this package first on PYTHONPATH, output unbuffered (a
    child's log is read live), no bytecode written where the child runs."""
    env = dict(env)
    env["PYTHONPATH"] = python_path(PACKAGE_PARENT, env.get("PYTHONPATH"))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def command(argv: list[str], profile: str | None, env: dict[str, str], *, writable=(),
            scratch: Path | None = None, readable=(), keep: tuple[str, ...] = ()) -> tuple[list[str], dict]:
    """(argv, env) that run `argv` in the sandbox `profile` (None: as it is, for trusted children)."""
    if profile is None:
        return list(argv), dict(env)
    return wrap(list(argv), profile, env=env, writable=writable, scratch=scratch, readable=readable,
                keep=keep)


def start(argv: list[str], profile: str | None, *, env: dict[str, str], cwd: str | Path | None = None,
          writable=(), scratch: Path | None = None, readable=(), keep: tuple[str, ...] = (),
          session: bool = True, **popen) -> subprocess.Popen:
    """Start `argv` in the sandbox `profile`, in a session (process group) of its own unless
    `session` is False (a child that must end with its parent's group, as a CI job's steps do)."""
    argv, env = command(argv, profile, env, writable=writable, scratch=scratch, readable=readable, keep=keep)
    return subprocess.Popen(argv, env=env, cwd=None if cwd is None else str(cwd), start_new_session=session,
                            **popen)


def run(argv: list[str], profile: str | None, *, env: dict[str, str], timeout: float | None = None,
        input=None, **kw) -> subprocess.CompletedProcess:
    """Run `argv` to its end as `start` starts it (stdin empty unless `input`); on a timeout its
    whole group is killed and subprocess.TimeoutExpired raised."""
    kw["stdin"] = subprocess.PIPE if input is not None else kw.get("stdin", subprocess.DEVNULL)
    proc = start(argv, profile, env=env, **kw)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_python(module: str, args: list[str], profile: str | None, *, env: dict[str, str], **kw):
    """Start `python -P -m module args...` (this package first on its path) as `start` does."""
    return start(module_argv(module, *args), profile, env=python_env(env), **kw)


def start_candidate_python(module: str, args: list[str], env: dict[str, str], cwd: Path, **popen):
    """A child that runs candidate code: the "candidate" profile, writable only `cwd` and its `tmp`."""
    return start_python(module, args, "candidate", env=env, cwd=cwd, writable=[cwd],
                        scratch=Path(cwd) / "tmp", **popen)


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (a child this module started); gone already is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def how_it_ended(code: int) -> str:
    """A child's exit status in words: the signal that killed it, or its exit code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def private_stdout():
    """In the child: a private copy of stdout for the protocol, and fd 1 pointed at stderr, so what
    the code it runs prints (from Python or C) goes to the log and never passes for a reply."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol
