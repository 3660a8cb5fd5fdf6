"""Every process that runs candidate code starts here: referee workers, their zygote, and the
compile processes that build a candidate's kernels ahead of its evaluation.

One place for what such a child needs: the package on its `PYTHONPATH`, the "candidate" sandbox
profile (kernelsmith/sandbox: writable only its work folder and scratch, no network, no secrets),
a process group of its own (so a kill takes whatever it started), and a protocol channel that
nothing the candidate prints can pass for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kernelsmith.pycmd import PACKAGE_PARENT, module_argv, python_path
from kernelsmith.sandbox import wrap


def child_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with this package first on PYTHONPATH and unbuffered output (a child's log is read live)."""
    env = dict(env)
    env["PYTHONPATH"] = python_path(PACKAGE_PARENT, env.get("PYTHONPATH"))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def sandboxed_command(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[list[str], dict[str, str]]:
    """`argv` inside the "candidate" sandbox, writable only `cwd` (with its scratch `cwd/tmp`)."""
    return wrap(argv, "candidate", env=child_env(env), writable=[cwd], scratch=Path(cwd) / "tmp")


def spawn(module: str, args: list[str], env: dict[str, str], cwd: Path, **popen) -> subprocess.Popen:
    """`python -P -m module args...` in the candidate sandbox, in a session (process group) of its own."""
    cmd, env = sandboxed_command(module_argv(module, *args), env, Path(cwd))
    return subprocess.Popen(cmd, env=env, cwd=str(cwd), start_new_session=True, **popen)


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (a child started by `spawn`); gone already is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def private_stdout():
    """In the child: a private copy of stdout for the protocol, and fd 1 pointed at stderr, so what
    candidate code prints (from Python or C) goes to the log and never passes for a reply."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol
