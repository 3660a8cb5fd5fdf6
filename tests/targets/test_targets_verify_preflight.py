"""verify's worktrees are proven possible where a new optimize run starts, not found impossible at
the end: a checkout from which `git worktree add` cannot work stops `optimize` at once, one line."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from hostile_demo import demo_target  # noqa: E402

from kernelsmith.cli import main  # noqa: E402
from kernelsmith.errors import KernelsmithError  # noqa: E402
from kernelsmith.onboard.checkout import head_sha  # noqa: E402
from kernelsmith.verify import preflight  # noqa: E402


def _git_checkout(tmp_path) -> tuple[Path, Path]:
    yaml_path = demo_target(tmp_path)
    src = tmp_path / "src"
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=src, env=env, check=True)
    return yaml_path, src


def test_preflight_passes_and_leaves_no_worktree_behind(tmp_path):
    _, src = _git_checkout(tmp_path)
    sha, is_git = head_sha(src)
    assert is_git
    preflight(src, sha)
    listing = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=src, capture_output=True,
                             text=True, check=True).stdout
    assert listing.count("worktree ") == 1  # only the checkout itself


def test_optimize_stops_at_once_when_verify_could_not_make_its_worktree(tmp_path, capsys):
    yaml_path, src = _git_checkout(tmp_path)
    (src / ".git" / "worktrees").write_text("not a folder\n")  # `git worktree add` cannot work here
    with pytest.raises(KernelsmithError, match="verify could not make a worktree"):
        preflight(src, head_sha(src)[0])
    run = tmp_path / "run"
    code = main(["optimize", str(yaml_path), "rms_norm", "--checkout", str(src), "--budget", "1",
                 "--mutator", "params", "--device", "interpret", "--out", str(run), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "verify could not make a worktree" in err[0]
    assert not (run / "archive.sqlite").exists() and not (run / "run.json").exists()
