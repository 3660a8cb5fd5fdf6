"""Checkouts of target repositories: a cached clone plus one git worktree per base commit, or a
user-given folder (`--checkout DIR`, which needs neither gitpython nor git).

Layout under cache_dir():
  repos/<target>-<key>.git        bare clone of clone_url (fetched on later runs, never edited)
  worktrees/<target>-<key>/<sha>  a worktree at one base commit, deleted and added anew at each use
                                  (`setup` runs again in it each time)
  snapshots/<target>-<key>        a plain folder clone_url (the demo) copied into a git repository

`setup` (and, in verify's own fresh worktrees, the tests) may write a worktree, its `.git` file
included; git is run only on the bare store, named explicitly (kernelsmith/gitsafe.py), never in a
worktree after target code ran there.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kernelsmith import gitsafe
from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.onboard.config import Target
from kernelsmith.paths import cache_dir, cache_lock
from kernelsmith.scratch import remove_tree

BOT_AUTHOR = ("kernelsmith[bot]", "kernelsmith@users.noreply.github.com")
KEEP_WORKTREES = 3  # worktrees kept per repository (older base commits are pruned)
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
VENV = ".kernelsmith-venv"  # per-checkout Python environment that `setup` installs into (finding 6)


@dataclass
class Checkout:
    """A folder holding the target's source at a known base commit."""

    path: Path
    base_sha: str
    is_git: bool


def safe_env(extra: dict | None = None) -> dict:
    """The current environment minus anything that looks like a credential (sandbox's scrubber)."""
    from kernelsmith.sandbox import scrubbed_env

    env = scrubbed_env()
    env.update(extra or {})
    return env


def _git(git_dir: Path | None, *args: str, cwd: Path | None = None, work_tree: Path | None = None,
         check: bool = True) -> str:
    """git on the repository `git_dir` only, through kernelsmith.gitsafe (hooks and fsmonitor off)."""
    ident = {"GIT_AUTHOR_NAME": BOT_AUTHOR[0], "GIT_AUTHOR_EMAIL": BOT_AUTHOR[1],
             "GIT_COMMITTER_NAME": BOT_AUTHOR[0], "GIT_COMMITTER_EMAIL": BOT_AUTHOR[1]}
    try:
        return gitsafe.out(git_dir, *args, cwd=cwd, work_tree=work_tree, env=ident, check=check)
    except gitsafe.GitFailed as e:
        raise KernelsmithError(str(e)) from None


def has_git() -> bool:
    """Whether the git command line is available."""
    return gitsafe.has_git()


def _cache_worktree_key(folder: Path) -> str | None:
    """The cache key of `folder` when it is one of the cache's worktrees (worktrees/<key>/<sha>)."""
    root = (cache_dir() / "worktrees").resolve()
    try:
        rel = Path(folder).resolve().relative_to(root).parts
    except ValueError:
        return None
    return rel[0] if len(rel) >= 2 else None


def git_dir_for(folder: str | Path) -> Path | None:
    """The repository trusted git commands use for the checkout `folder`, or None without one.

    A cache worktree (where `setup` ran, `.git` included) maps to its bare store in the cache, by the
    cache's own layout: its `.git` file is never read. Any other folder (`--checkout DIR`, a snapshot)
    is one kernelsmith ran no target code in: its own `.git`.
    """
    folder = Path(os.path.abspath(folder))
    key = _cache_worktree_key(folder)
    if key is not None:
        store = cache_dir() / "repos" / f"{key}.git"
        return store if store.is_dir() else None
    dotgit = folder / ".git"
    return dotgit if dotgit.exists() else None


def tree_hash(folder: Path) -> str:
    """A content hash of a folder's files (the base id where git is unavailable)."""
    skip = {".git", "__pycache__", ".pytest_cache", ".ruff_cache"}
    h = hashlib.sha1()
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and not skip.intersection(p.relative_to(folder).parts) and p.suffix != ".pyc":
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return "tree-" + h.hexdigest()


def head_sha(folder: Path) -> tuple[str, bool]:
    """(HEAD commit, True) for a git folder; (content hash, False) without git."""
    git_dir = git_dir_for(folder) if has_git() else None
    if git_dir is not None:
        if _cache_worktree_key(Path(folder)) is not None:
            # A cache worktree's HEAD is read from the store's record of it, not from its `.git`.
            git_dir = gitsafe.worktree_meta(git_dir, Path(os.path.abspath(folder)))
        try:
            if git_dir is not None:
                return _git(git_dir, "rev-parse", "--verify", "HEAD^{commit}"), True
        except KernelsmithError:
            pass
    return tree_hash(folder), False


def is_commit(sha: str) -> bool:
    """Whether `sha` is a full git commit id (not a `tree-` content hash)."""
    return bool(_SHA_RE.match(sha or ""))


def read_at_base(folder: Path, base_sha: str, rel: str) -> bytes | None:
    """The bytes of `rel` at the base commit (git), or in the folder itself (no git); None if absent."""
    folder = Path(folder)
    git_dir = git_dir_for(folder) if is_commit(base_sha) and has_git() else None
    if git_dir is not None:
        out = gitsafe.run(git_dir, "cat-file", "blob", f"{base_sha}:{rel}", text=False, check=False)
        return out.stdout if out.returncode == 0 else None
    p = folder / rel
    return p.read_bytes() if p.is_file() else None


def make_venv(folder: Path) -> Path:
    """`folder`/.kernelsmith-venv: a Python environment of this checkout's own that sees the
    runner's packages (read-only) and takes what `setup` installs, so `pip install -e .` never
    lands in the runner's Python (where a later run would find it). Returns its bin folder."""
    import site
    import sysconfig
    import venv

    root = Path(folder) / VENV
    if not (root / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(root)
        purelib = sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)})
        dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if Path(d).is_dir()]
        Path(purelib, "_kernelsmith_runner.pth").write_text(
            "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
        pip = root / "bin" / "pip"
        pip.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\nfrom pip._internal.cli.main import main\n"
                       "sys.exit(main())\n")
        pip.chmod(0o755)
    return root / "bin"


def venv_env(folder: Path, env: dict) -> dict:
    """`env` with `folder`'s own Python environment first on PATH (when setup made one)."""
    bin_dir = Path(folder) / VENV / "bin"
    if not bin_dir.is_dir():
        return env
    path = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    return {**env, "PATH": path, "VIRTUAL_ENV": str(bin_dir.parent)}


def run_setup(target: Target, folder: Path) -> None:
    """Run the target's `setup` command in `folder`, inside the "setup" sandbox: only `folder` and a
    scratch folder are writable, installs go to `folder`'s own Python environment, no network,
    no tokens."""
    if not target.setup:
        return
    from kernelsmith.sandbox.spawn import start
    from kernelsmith.scratch import scratch_dir

    make_venv(folder)
    with scratch_dir("kernelsmith-setup-") as scratch:  # the setup writes there: no cleanup() chmod
        # The cache's repositories stay readable (read-only) where the profile empties /tmp, so a
        # setup that asks git (a version from tags) sees its worktree's store as anywhere else.
        stores = [cache_dir() / "repos"] if (cache_dir() / "repos").is_dir() else []
        proc = start(["/bin/sh", "-c", target.setup], "setup", env=venv_env(folder, dict(os.environ)),
                     cwd=folder, writable=[folder], scratch=Path(scratch), readable=stores,
                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output, _ = proc.communicate()
    if proc.returncode != 0:
        tail = "\n".join(output.splitlines()[-20:])
        raise KernelsmithError(f"{target.path}: setup {target.setup!r} failed (exit {proc.returncode}) "
                               f"in {folder}:\n{tail}")


def _cache_key(target: Target, url: str, salt: str = "") -> str:
    return f"{target.name}-" + hashlib.sha1(f"{url}@{salt}".encode()).hexdigest()[:10]


def _snapshot_plain_folder(target: Target, local: Path) -> Path:
    """Copy a plain folder into a git repository with one commit (so it has a base sha)."""
    key = _cache_key(target, str(local), tree_hash(local))  # edited folder => fresh snapshot
    dest = cache_dir() / "snapshots" / key
    with cache_lock(dest.with_suffix(".lock")):
        if dest.exists():
            return dest
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(local, tmp, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        if has_git():
            _git(None, "init", "-q", "--template=", "-b", target.base, str(tmp), cwd=tmp.parent)
            _git(tmp / ".git", "add", "-A", cwd=tmp, work_tree=tmp)
            _git(tmp / ".git", "commit", "-q", "--no-verify", "-m",
                 "kernelsmith: snapshot of the bundled source", cwd=tmp, work_tree=tmp)
        tmp.rename(dest)
    return dest


def prepare_checkout(target: Target, checkout: str | Path | None = None, *, setup: bool = True) -> Checkout:
    """The target's source: `checkout` as given, or a cached clone of `clone_url` at `base`.

    `setup=False` skips the target's `setup` command (a job holding credentials runs no target code).
    """
    if checkout is not None:
        path = Path(checkout).resolve()
        if not path.is_dir():
            raise ConfigError(path, "checkout folder not found", "--checkout")
        sha, is_git = head_sha(path)
        return Checkout(path, sha, is_git)
    url = target.resolved_clone_url()
    local = Path(url) if "://" not in url and not url.startswith("git@") else None
    if local is not None:
        if not local.exists():
            raise ConfigError(target.path, f"local clone_url {url} not found", "clone_url")
        if not (local / ".git").exists() and not (local / "HEAD").exists():
            snap = _snapshot_plain_folder(target, local)
            if not has_git():
                # Without git the snapshot (a plain copy, content-hashed) itself is the checkout.
                sha, is_git = head_sha(snap)
                return Checkout(snap, sha, is_git)
            url = str(snap)
    return _worktree_checkout(target, url, setup)


def _worktree_checkout(target: Target, url: str, setup: bool = True) -> Checkout:
    """Fetch `url` into the cache's bare store, then a worktree made fresh at the tip of `base`."""
    if not has_git():
        raise KernelsmithError("cloning a target needs the git command line; "
                               "or pass --checkout DIR with a prepared checkout")
    key = _cache_key(target, url)
    bare = cache_dir() / "repos" / f"{key}.git"
    with cache_lock(bare.with_suffix(".lock")):
        _clone_or_fetch(url, bare, target)
        sha = _git(bare, "rev-parse", "--verify", f"refs/remotes/origin/{target.base}^{{commit}}")
        wt = cache_dir() / "worktrees" / key / sha[:12]
        _fresh_worktree(bare, wt, sha)
        _prune_worktrees(bare, wt.parent, keep=wt)
    if setup and target.setup:
        run_setup(target, wt)
    return Checkout(wt, sha, True)


def _clone_or_fetch(url: str, bare: Path, target: Target) -> None:
    """The bare store: made by this process, fetched into, never handed writable to target code."""
    refspec = f"+refs/heads/{target.base}:refs/remotes/origin/{target.base}"
    try:
        if not (bare / "HEAD").is_file():
            bare.parent.mkdir(parents=True, exist_ok=True)
            _git(None, "init", "-q", "--bare", "--template=", str(bare), cwd=bare.parent)
        _git(bare, "fetch", "-q", "--no-tags", "--no-recurse-submodules", url, refspec)
    except KernelsmithError as e:
        raise ConfigError(target.path, f"cannot fetch branch {target.base!r} from {url}: {e}",
                          "base") from None


def _fresh_worktree(store: Path, wt: Path, sha: str) -> None:
    """A new worktree of `store` at `sha` in `wt`: an older tree there is deleted (never reset or
    cleaned by git: setup and tests ran in it and could have rewritten its `.git`), then added anew."""
    if os.path.lexists(wt):
        remove_tree(str(wt))
        if os.path.lexists(wt):
            raise KernelsmithError(f"{wt}: cannot remove the old worktree")
    _git(store, "worktree", "prune")
    wt.parent.mkdir(parents=True, exist_ok=True)
    _git(store, "worktree", "add", "--detach", "-f", str(wt), sha)


def _prune_worktrees(store: Path, folder: Path, keep: Path) -> None:
    """Keep the newest KEEP_WORKTREES worktrees of this repository, delete older ones (by removing
    the folder, then `worktree prune` in the store: git never looks inside them)."""
    trees = sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and p != keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in trees[KEEP_WORKTREES - 1:]:
        remove_tree(str(old))
    _git(store, "worktree", "prune", check=False)


@contextmanager
def clean_worktree(checkout: Path, base_sha: str, dest: Path):
    """A fresh copy of `checkout` at `base_sha` in `dest` (a new git worktree of the checkout's
    store, or a plain copy without git), deleted on exit.

    git runs only on the store (git_dir_for): never in `dest` once untrusted code may have run there,
    nor in `checkout`. A plain copy is only trusted when its content hash still equals `base_sha`.
    """
    checkout, dest = Path(checkout), Path(dest)
    if os.path.lexists(dest):
        remove_tree(str(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    if is_commit(base_sha):
        store = worktree_store(checkout, base_sha)
        _git(store, "worktree", "add", "--detach", "-f", str(dest), base_sha)
        try:
            yield dest
        finally:
            remove_tree(str(dest))
            _git(store, "worktree", "prune", check=False)
        return
    current = tree_hash(checkout)
    if current != base_sha:
        raise KernelsmithError(f"{checkout}: the folder changed since the run (content hash {current[:17]}, "
                               f"run recorded {base_sha[:17]}); cannot rebuild the base")
    shutil.copytree(checkout, dest, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache"))
    try:
        yield dest
    finally:
        remove_tree(str(dest))


def worktree_store(checkout: Path, base_sha: str) -> Path:
    """The store fresh worktrees of `checkout` at `base_sha` come from; one clear error when git, the
    store or the commit is missing."""
    if not has_git():
        raise KernelsmithError(f"{checkout}: base {base_sha[:12]} is a git commit, but git is missing")
    store = git_dir_for(checkout)
    if store is None:
        raise KernelsmithError(f"{checkout}: no git repository found for base {base_sha[:12]} "
                               f"(neither the cache's store nor {checkout}/.git)")
    if not gitsafe.ok(store, "cat-file", "-e", f"{base_sha}^{{commit}}"):
        raise KernelsmithError(f"{checkout}: base commit {base_sha[:12]} is not in {store}")
    return store


def preflight(checkout: Path, base_sha: str) -> None:
    """Prove that verify can make its fresh worktrees of `checkout` at `base_sha` (one is added with
    --no-checkout and deleted): KernelsmithError with one clear line when it cannot."""
    if not is_commit(base_sha):
        return  # a plain folder: verify copies it, after checking its content hash
    store = worktree_store(Path(checkout), base_sha)
    probe = Path(tempfile.mkdtemp(prefix="kernelsmith-preflight-", dir=cache_dir())) / "tree"
    try:
        _git(store, "worktree", "add", "--detach", "--no-checkout", "-f", str(probe), base_sha)
    except KernelsmithError as e:
        raise KernelsmithError(f"{checkout}: verify could not make a worktree at {base_sha[:12]}: "
                               f"{str(e).splitlines()[0]}") from None
    finally:
        remove_tree(str(probe.parent))
        _git(store, "worktree", "prune", check=False)
