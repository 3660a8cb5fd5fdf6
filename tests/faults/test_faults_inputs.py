"""The tool's own inputs and environment failing (damaged archive, run.json, an out directory that
cannot be written, a full disk, a checkout gone): one line naming the file, exit 2, nothing replaced."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from faultkit import RUN, comparable, ks, one_line_error, rows

from kernelsmith.errors import ConfigError
from kernelsmith.rundir import write_json


def _resume(out: Path, *extra: str):
    return ks(*RUN, "--out", str(out), "--resume", *extra)


def test_corrupt_archive_on_resume_and_report_exits_2(finished):
    db = finished / "archive.sqlite"
    damaged = b"this is no SQLite file" + db.read_bytes()[22:]
    db.write_bytes(damaged)
    for proc in (_resume(finished), ks("report", str(finished))):
        assert proc.returncode == 2
        line = one_line_error(proc)
        assert str(db) in line and "start a new run" in line
    assert db.read_bytes() == damaged


def test_truncated_archive_on_resume_exits_2(finished):
    db = finished / "archive.sqlite"
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    proc = _resume(finished)
    assert proc.returncode == 2 and str(db) in one_line_error(proc)
    assert db.read_bytes() == data[: len(data) // 2]


def test_empty_or_deleted_archive_is_refused_not_started_over(finished):
    db = finished / "archive.sqlite"
    db.write_bytes(b"")
    proc = _resume(finished)
    assert proc.returncode == 2 and "is empty" in one_line_error(proc)
    assert db.read_bytes() == b""
    db.unlink()
    proc = _resume(finished)
    assert proc.returncode == 2 and "not found" in one_line_error(proc)
    assert not db.exists()


@pytest.mark.parametrize("field,value", [("seed", "0"), ("gpus", "0"), ("budget", "4"), ("seed", True)])
def test_wrong_types_in_run_json_exit_2_naming_the_field(finished, field, value):
    path = finished / "run.json"
    run = json.loads(path.read_text())
    run[field] = value
    path.write_text(json.dumps(run))
    proc = _resume(finished)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert f"run.json: {field}: must be" in line


def test_out_directory_that_cannot_be_written_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the run directory's parent should be\n")
    proc = ks(*RUN, "--budget", "2", "--out", str(blocker / "run"))
    assert proc.returncode == 2 and str(blocker / "run") in one_line_error(proc)


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to fill ({got.stderr.strip()}); "
                    "test_enospc_on_a_run_file_write_is_one_line covers the write")


def test_full_disk_mid_run_exits_2_then_resume_loses_nothing(tmp_path, uninterrupted):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "100k")  # fills while generation 2 is recorded or judged
    try:
        out = disk / "run"
        proc = ks(*RUN, "--budget", "6", "--seed", "0", "--out", str(out))
        assert proc.returncode == 2
        assert str(out) in one_line_error(proc) and "free disk space" in proc.stderr
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        proc = ks(*RUN, "--budget", "6", "--seed", "0", "--out", str(out), "--resume")
        assert proc.returncode == 0, proc.stderr
        assert comparable(rows(out / "archive.sqlite")) == comparable(uninterrupted)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_enospc_on_a_run_file_write_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    path.write_text('{"old": true}\n')

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("kernelsmith.rundir.os.replace", full)
    with pytest.raises(ConfigError, match=r"result.json: cannot be written \(No space left on device\)"):
        write_json(path, {"new": True})
    assert path.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary file left


def test_verify_with_a_checkout_that_no_longer_exists_exits_2(finished, tmp_path):
    run = json.loads((finished / "run.json").read_text())
    gone = tmp_path / "gone-checkout"
    shutil.copytree(run["checkout"], gone, symlinks=True)
    run["checkout"] = str(gone)
    (finished / "run.json").write_text(json.dumps(run))
    shutil.rmtree(gone)
    proc = ks("verify", str(finished))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "run.json: checkout:" in line and "no longer exists" in line
