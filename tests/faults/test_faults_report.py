"""`kernelsmith report` on runs that did not finish and on damaged archives: exit 2, nothing altered."""

from __future__ import annotations

import subprocess

import pytest
from faultkit import KILL_POINTS, ks, one_line_error


@pytest.mark.parametrize("point", KILL_POINTS)
def test_report_on_a_killed_run_says_it_did_not_finish(killed_then_resumed, point):
    got = killed_then_resumed(point)  # conftest.py: `report` ran between the kill and the resume
    assert got["killed_rc"] == -9, (point, got["killed_rc"], got["killed_stderr"])
    proc = subprocess.CompletedProcess(["kernelsmith", "report"], got["report_rc"], "", got["report_stderr"])
    assert proc.returncode == 2 and "the run did not finish" in one_line_error(proc)
    assert not got["report_md"] and got["archive_kept"]


def test_report_without_result_json_leaves_report_md_as_it_was(finished):
    report = (finished / "report.md").read_bytes()
    assert (finished / "winner" / "rms_norm.py").is_file()
    (finished / "result.json").unlink()
    proc = ks("report", str(finished))
    assert proc.returncode == 2 and "did not finish" in one_line_error(proc)
    assert (finished / "report.md").read_bytes() == report


def test_report_on_an_empty_archive_writes_nothing(finished):
    report = (finished / "report.md").read_bytes()
    (finished / "archive.sqlite").write_bytes(b"")
    proc = ks("report", str(finished))
    assert proc.returncode == 2 and "archive.sqlite" in one_line_error(proc)
    assert (finished / "archive.sqlite").read_bytes() == b""
    assert (finished / "report.md").read_bytes() == report


def test_report_never_alters_the_archive(finished):
    before = (finished / "archive.sqlite").read_bytes()
    proc = ks("report", str(finished))
    assert proc.returncode == 0, proc.stderr
    assert (finished / "archive.sqlite").read_bytes() == before
    assert sorted(p.name for p in finished.iterdir() if p.name.startswith("archive")) == ["archive.sqlite"]
