"""One owner per run directory (search/runlock.py): real processes contend for it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest
from faultkit import RUN, command, ks, one_line_error, rows

from kernelsmith.errors import ConfigError

HOLD = ("import sys, time\nfrom kernelsmith.search.runlock import acquire\n"
        "acquire(sys.argv[1]); print('held', flush=True); time.sleep(120)\n")


@pytest.fixture
def holder(finished):
    """Another process holding `finished`'s lock."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(finished)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_resume_of_a_locked_run_exits_2_naming_the_holder(finished, holder):
    before = (finished / "archive.sqlite").read_bytes()
    for cmd in (["optimize", *RUN[1:]], ["sweep", "demo", "rms_norm", "--device", "interpret"]):
        proc = ks(*cmd, "--out", str(finished), "--resume")
        assert proc.returncode == 2
        line = one_line_error(proc)
        assert f"pid {holder.pid}" in line and str(finished) in line and "--wait" in line
    assert (finished / "archive.sqlite").read_bytes() == before


def test_new_run_into_a_locked_empty_directory_exits_2(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with_lock = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert with_lock.stdout.readline().strip() == "held"
        proc = ks(*RUN, "--budget", "2", "--out", str(out))
        assert proc.returncode == 2 and f"pid {with_lock.pid}" in one_line_error(proc)
        assert not (out / "run.json").exists() and not (out / "archive.sqlite").exists()
    finally:
        with_lock.kill()
        with_lock.wait()


def test_wait_waits_for_the_holder_then_resumes(finished, holder):
    proc = subprocess.Popen(command(*RUN, "--out", str(finished), "--resume", "--budget", "4", "--wait"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert f"waiting for pid {holder.pid}" in first
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting while the holder lives
        holder.kill()
        holder.wait()
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert sum(1 for r in rows(finished / "archive.sqlite") if r["mutator"] != "base") == 4


def test_two_resumes_at_once_one_runs_one_exits_2(finished):
    cmd = command(*RUN, "--out", str(finished), "--resume", "--budget", "6")
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for _ in range(2)]
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    assert sorted(codes) == [0, 2], [p.stderr.read() for p in procs]
    loser = procs[codes.index(2)]
    assert "in use by another kernelsmith process (pid" in loser.stderr.read()
    got = rows(finished / "archive.sqlite")
    assert sum(1 for r in got if r["mutator"] != "base") == 6
    assert [r["generation"] for r in got] == [0, 1, 1, 2, 2, 3, 3]


def test_a_planted_link_as_lock_file_is_refused(tmp_path):
    from kernelsmith.search import runlock

    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.write_text("keep\n")
    (out / runlock.LOCK_NAME).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="symbolic link"):
        runlock.acquire(out)
    assert elsewhere.read_text() == "keep\n"


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    from kernelsmith.search import runlock

    lock = runlock.acquire(tmp_path)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:  # outlives its parent's hold, as a worker of a killed run might
        os.write(ready_w, b"x")  # os.fork() has returned here: the at-fork handlers have run
        time.sleep(3)
        os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        lock.release()
        fd = os.open(tmp_path / runlock.LOCK_NAME, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the child still held it
        finally:
            os.close(fd)
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(ready_r)
        os.close(ready_w)
