"""kernelsmith.safefs: trusted writes and reads never go through a planted link."""

import os

import pytest

from kernelsmith import safefs


def test_write_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    work = tmp_path / "work"
    work.mkdir()
    (work / "cand.py").symlink_to(outside)
    safefs.write_file(work / "cand.py", "code")
    assert outside.read_text() == "precious"
    assert not (work / "cand.py").is_symlink() and (work / "cand.py").read_text() == "code"


def test_write_replaces_a_planted_hardlink(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    work = tmp_path / "work"
    work.mkdir()
    os.link(outside, work / "cand.py")
    safefs.write_file(work / "cand.py", "code")
    assert outside.read_text() == "precious"
    assert (work / "cand.py").read_text() == "code"


def test_a_symlinked_folder_on_the_way_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "candidates").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(safefs.UnsafePath):
        safefs.write_file(work / "candidates" / "c1" / "op.py", "code")
    assert list(elsewhere.iterdir()) == []


def test_reads_refuse_links_hardlinks_and_fifos(tmp_path):
    real = tmp_path / "real"
    real.write_text("x")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(safefs.UnsafePath):
        safefs.read_file(tmp_path / "link")
    os.link(real, tmp_path / "hard")
    with pytest.raises(safefs.UnsafePath):
        safefs.read_file(tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(safefs.UnsafePath):
        safefs.read_file(tmp_path / "fifo")
    (tmp_path / "plain").write_text("ok")
    assert safefs.read_text(tmp_path / "plain") == "ok"
    with pytest.raises(safefs.UnsafePath):
        safefs.read_file(tmp_path / "plain", limit=1)


def test_private_dir_refuses_what_exists_and_relative_paths_stay_inside(tmp_path):
    made = safefs.private_dir(tmp_path / "a" / "b")
    assert made.is_dir()
    with pytest.raises(FileExistsError):
        safefs.private_dir(tmp_path / "a" / "b")
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(safefs.UnsafePath):
            safefs.relative_parts(bad)
