"""scratch.py: folders untrusted code wrote into go away whole, and no link left in them is ever
followed (TemporaryDirectory.cleanup chmods through one on CPython before 3.11.8 / 3.12.2)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kernelsmith.scratch import remove_tree, scratch_dir


def _deny_first_unlink_of(name: str, monkeypatch) -> list:
    """The first unlink of a path ending in `name` fails as a read-only folder makes it fail (tests
    run as root, where none does)."""
    real, denied = os.unlink, []

    def unlink(path, *a, **kw):
        if os.fspath(path).endswith(name) and not denied:
            denied.append(path)
            raise PermissionError(13, "Permission denied", path)
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "unlink", unlink)
    return denied


def test_a_scratch_folder_is_removed_with_what_was_written_there_even_after_an_error(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    denied = _deny_first_unlink_of("link", monkeypatch)
    with pytest.raises(RuntimeError), scratch_dir("ks-test-") as path:
        locked = Path(path) / "a" / "locked"
        locked.mkdir(parents=True)
        (locked / "link").symlink_to(secret)
        (locked / "file").write_text("y")
        locked.chmod(0o500)
        raise RuntimeError("the setup failed")
    assert denied and not Path(path).exists()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.read_text() == "x"


def test_unreadable_folders_are_opened_up_without_following_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o750)
    top = tmp_path / "top"
    (top / "shut").mkdir(parents=True)
    (top / "shut" / "f").write_text("z")
    (top / "to_outside").symlink_to(outside, target_is_directory=True)
    (top / "shut").chmod(0o000)
    remove_tree(str(top))
    assert not top.exists()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o750  # the link's target was not chmodded


def test_a_scratch_folder_never_removed_by_hand_goes_at_exit(tmp_path):
    """Where a Referee is never closed: the folder goes when the interpreter exits (remove_tree, as
    remove() would: not TemporaryDirectory.cleanup)."""
    import subprocess
    import sys

    code = ("from kernelsmith.scratch import ScratchDir; "
            f"d = ScratchDir('ks-', dir={str(tmp_path)!r}); open(d.name + '/f', 'w').write('x'); "
            "print(d.name)")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(root)}, check=True)
    folder = Path(out.stdout.strip())
    assert folder.parent == tmp_path and not folder.exists()


def test_a_verify_commands_scratch_goes_whole_after_a_failed_removal(tmp_path, monkeypatch):
    """verify runs a target's own tests (untrusted) with a private $TMPDIR; what they leave there,
    links and folders that refuse removal included, goes with it (shutil.rmtree(ignore_errors)
    left such a folder behind)."""
    from kernelsmith.onboard.checkout import safe_env
    from kernelsmith.verify import run_command

    secret = tmp_path / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    denied = _deny_first_unlink_of("link", monkeypatch)
    made = run_command(f'mkdir -p "$TMPDIR/a/locked" && ln -s {secret} "$TMPDIR/a/locked/link" '
                       '&& chmod 500 "$TMPDIR/a/locked" && echo "scratch=$TMPDIR"', tmp_path, safe_env(), 60)
    assert made.exit_code == 0, made.output_tail
    path = Path(made.output.split("scratch=")[1].split()[0])
    assert denied and path.name.startswith("verify-cmd-") and not path.exists()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
