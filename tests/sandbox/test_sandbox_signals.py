"""A sandboxed process killed by a signal from outside is reported as killed by that signal,
naming the process: the launcher relayed SIGKILL as "exit 1" (and a zygote-forked judge as
"exited with status 70"), because signal.signal(SIGKILL, ...) raises."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernelsmith import sandbox

ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def wait_for(fn, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = fn()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def _sandboxed_sleep(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    cmd, env = sandbox.wrap(["sleep", "60"], "candidate", env=dict(os.environ), writable=[work])
    proc = subprocess.Popen(cmd, env=env, cwd=work, stderr=subprocess.PIPE, text=True)
    init = wait_for(lambda: children(proc.pid))[0]  # L -> C (the sandbox's init) -> the command
    command = wait_for(lambda: children(init))[0]
    wait_for(lambda: Path(f"/proc/{command}/cmdline").read_bytes().startswith(b"sleep"))
    return proc, init, command


def test_a_command_killed_from_outside_is_reported_killed_by_that_signal(tmp_path):
    proc, _, command = _sandboxed_sleep(tmp_path)
    os.kill(command, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    assert "the sandboxed command 'sleep 60' was killed by SIGKILL" in err


def test_a_killed_sandbox_init_is_named(tmp_path):
    proc, init, _ = _sandboxed_sleep(tmp_path)
    os.kill(init, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    assert f"the sandbox's init process (pid {init}) was killed by SIGKILL" in err


def test_a_judge_killed_from_outside_is_reported_killed_not_exited_70(tmp_path):
    from kernelsmith.referee.proc.process import WorkerProcess, Zygote
    from kernelsmith.referee.proc.warm import worker_env

    env = worker_env("interpret", None)
    zygote = Zygote(env, tmp_path, log=tmp_path / "zygote.log")
    try:
        zygote.wait_ready()
        worker = WorkerProcess(env, tmp_path, zygote=zygote)
        assert worker.forked and zygote.pidns
        # The worker's pid is the waiting parent; the judge is its child, pid 1 of its own namespace.
        judge = wait_for(lambda: children(worker.proc.pid))[0]
        os.kill(judge, signal.SIGKILL)
        assert worker.proc.wait(timeout=30) == -signal.SIGKILL
        note = worker._death_note()
        assert note.startswith(f"the judge (worker process {worker.proc.pid}) was killed by SIGKILL"), note
        worker.kill()
    finally:
        zygote.close()
    assert "status 70" not in (tmp_path / "zygote.log").read_text()


def test_exit_statuses_are_kept(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    cmd, env = sandbox.wrap([sys.executable, "-c", "raise SystemExit(7)"], "candidate", env=dict(os.environ),
                            writable=[work])
    assert subprocess.run(cmd, env=env, cwd=work).returncode == 7
