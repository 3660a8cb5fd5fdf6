"""kernelsmith.gitsafe: the one way trusted code runs git (explicit repository, hooks, fsmonitor and
inherited GIT_* variables off), and the checkout's mapping from a worktree to its store."""

import os
import subprocess
from pathlib import Path

from kernelsmith import gitsafe
from kernelsmith.onboard.checkout import git_dir_for, head_sha
from kernelsmith.paths import cache_dir


def _repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir(parents=True)
    (src / "a.txt").write_text("a\n")
    gitsafe.run(None, "init", "-q", "-b", "main", str(src), cwd=tmp_path)
    ident = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
             "GIT_COMMITTER_EMAIL": "t@t"}
    gitsafe.run(src / ".git", "add", "-A", work_tree=src, cwd=src)
    gitsafe.run(src / ".git", "commit", "-q", "-m", "one", work_tree=src, cwd=src, env=ident)
    return src


def _plant(git_dir: Path, marker: Path) -> None:
    hook = f"#!/bin/sh\necho ran >> {marker}\n"
    (git_dir / "hooks").mkdir(exist_ok=True)
    for name in ("post-checkout", "reference-transaction", "fsmonitor", "post-index-change"):
        (git_dir / "hooks" / name).write_text(hook)
        (git_dir / "hooks" / name).chmod(0o755)
    with open(git_dir / "config", "a") as f:
        f.write(f"[core]\n\tfsmonitor = {git_dir / 'hooks' / 'fsmonitor'}\n")


def test_hooks_and_fsmonitor_in_the_repository_config_do_not_run(tmp_path):
    src = _repo(tmp_path)
    marker = tmp_path / "marker"
    _plant(src / ".git", marker)
    sha = gitsafe.out(src / ".git", "rev-parse", "HEAD")
    gitsafe.run(src / ".git", "worktree", "add", "--detach", str(tmp_path / "wt"), sha)
    gitsafe.run(src / ".git", "update-ref", "refs/heads/other", sha)
    gitsafe.run(src / ".git", "status", "--short", work_tree=src, cwd=src)
    assert (tmp_path / "wt" / "a.txt").read_text() == "a\n" and not marker.exists()
    # Control: plain git with the same repository runs them.
    subprocess.run(["git", "-C", str(src), "status", "--short"], capture_output=True,
                   env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")})
    assert marker.exists()


def test_no_inherited_git_variable_reaches_git(tmp_path, monkeypatch):
    src = _repo(tmp_path)
    other = _repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.hookspath'='/tmp'")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "/bin/false")
    env = gitsafe.safe_env({"GIT_INDEX_FILE": "x"})
    assert not {"GIT_DIR", "GIT_CONFIG_PARAMETERS", "GIT_EXTERNAL_DIFF"} & set(env)
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_INDEX_FILE"] == "x"  # the caller's own settings stay
    assert gitsafe.out(src / ".git", "rev-parse", "--absolute-git-dir") == str((src / ".git").resolve())
    cmd = gitsafe.argv(src / ".git", "status")
    assert "core.hooksPath=/dev/null" in cmd and "core.fsmonitor=false" in cmd
    assert cmd[-2:] == [f"--git-dir={src / '.git'}", "status"]


def test_a_cache_worktree_maps_to_its_store_never_to_its_own_git_file(tmp_path):
    src = _repo(tmp_path)
    store = cache_dir() / "repos" / "t-gitsafe.git"
    gitsafe.run(None, "clone", "-q", "--bare", str(src), str(store), cwd=tmp_path)
    sha = gitsafe.out(store, "rev-parse", "HEAD")
    wt = cache_dir() / "worktrees" / "t-gitsafe" / sha[:12]
    gitsafe.run(store, "worktree", "add", "--detach", "-f", str(wt), sha)
    try:
        # Untrusted code rewrites the worktree's `.git` to name a repository of its own.
        (wt / ".git").write_text(f"gitdir: {src / '.git'}\n")
        gitsafe.run(src / ".git", "commit", "-q", "--allow-empty", "-m", "two", cwd=src, work_tree=src,
                    env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                         "GIT_COMMITTER_EMAIL": "t@t"})
        assert git_dir_for(wt) == store
        assert gitsafe.worktree_meta(store, wt) is not None
        assert head_sha(wt) == (sha, True)  # the store's record, not the planted repository's HEAD
    finally:
        subprocess.run(["rm", "-rf", str(wt), str(store)], check=True)


def test_publish_git_ignores_an_inherited_git_dir(tmp_path, monkeypatch):
    """Publish's scratch repository (bot/gitops.py) against a local remote: a GIT_DIR in the
    environment naming a repository with hooks neither redirects its commands nor runs them."""
    from bot.gitops import Publisher

    src = _repo(tmp_path / "up")
    (src / "pkg").mkdir()
    (src / "pkg" / "op.py").write_text("old\n")
    ident = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
             "GIT_COMMITTER_EMAIL": "t@t"}
    gitsafe.run(src / ".git", "add", "-A", work_tree=src, cwd=src)
    gitsafe.run(src / ".git", "commit", "-q", "-m", "op", work_tree=src, cwd=src, env=ident)
    server = tmp_path / "srv"
    (server / "owner").mkdir(parents=True)
    gitsafe.run(None, "clone", "-q", "--bare", str(src), str(server / "owner" / "name.git"), cwd=tmp_path)
    evil = _repo(tmp_path / "evil")
    marker = tmp_path / "marker"
    _plant(evil / ".git", marker)
    monkeypatch.setenv("GIT_DIR", str(evil / ".git"))
    pub = Publisher(tmp_path / "work", f"file://{server}", "owner/name", "owner/name",
                    token_fn=lambda name: None)
    tip = pub.fetch_base("main")
    update = pub.update_branch("kernelsmith/op", "main", tip, "pkg/op.py", b"new\n", "faster op")
    assert update.action == "created" and not marker.exists()
    shown = gitsafe.out(server / "owner" / "name.git", "show", "kernelsmith/op:pkg/op.py")
    assert shown == "new"
    assert not gitsafe.ok(evil / ".git", "rev-parse", "--verify", "-q", "refs/remotes/base/main")
