"""Checkouts of target repositories: a cached clone plus one git worktree per base commit, or a
user-given folder (`--checkout DIR`, which needs neither gitpython nor git).

Layout under cache_dir():
  repos/<target>-<key>.git        bare clone of clone_url (fetched on later runs, never edited)
  worktrees/<target>-<key>/<sha>  a worktree at one base commit, reset and cleaned of every untracked
                                  and ignored file at each use; `setup` runs again in it each time
  snapshots/<target>-<key>        a plain folder clone_url (the demo) copied into a git repository
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, KernelsmithError
from ..paths import cache_dir
from .config import Target

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
    from ..sandbox import scrubbed_env

    env = scrubbed_env()
    env.update(extra or {})
    return env


def _git(cwd: Path, *args: str, check: bool = True) -> str:
    env_id = ["-c", f"user.name={BOT_AUTHOR[0]}", "-c", f"user.email={BOT_AUTHOR[1]}"]
    out = subprocess.run(["git", *env_id, *args], cwd=cwd, capture_output=True, text=True,
                         env=safe_env({"GIT_TERMINAL_PROMPT": "0"}))
    if check and out.returncode != 0:
        raise KernelsmithError(f"git {' '.join(args)} failed in {cwd}: {out.stderr.strip()}")
    return out.stdout.strip()


def has_git() -> bool:
    """Whether the git command line is available."""
    return shutil.which("git") is not None


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
    if has_git() and (Path(folder) / ".git").exists():
        try:
            return _git(folder, "rev-parse", "HEAD"), True
        except KernelsmithError:
            pass
    return tree_hash(folder), False


def is_commit(sha: str) -> bool:
    """Whether `sha` is a full git commit id (not a `tree-` content hash)."""
    return bool(_SHA_RE.match(sha or ""))


def read_at_base(folder: Path, base_sha: str, rel: str) -> bytes | None:
    """The bytes of `rel` at the base commit (git), or in the folder itself (no git); None if absent."""
    folder = Path(folder)
    if is_commit(base_sha) and has_git() and (folder / ".git").exists():
        out = subprocess.run(["git", "show", f"{base_sha}:{rel}"], cwd=folder, capture_output=True)
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
    from ..sandbox import wrap
    from ..scratch import scratch_dir

    make_venv(folder)
    with scratch_dir("kernelsmith-setup-") as scratch:  # the setup writes there: no cleanup() chmod
        cmd, env = wrap(["/bin/sh", "-c", target.setup], "setup", env=venv_env(folder, dict(os.environ)),
                        writable=[folder], scratch=Path(scratch))
        proc = subprocess.run(cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        raise KernelsmithError(f"{target.path}: setup {target.setup!r} failed (exit {proc.returncode}) "
                               f"in {folder}:\n{tail}")


@contextmanager
def _locked(lock_path: Path):
    """An exclusive lock so two runs on one machine never clone or add worktrees at once."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cache_key(target: Target, url: str, salt: str = "") -> str:
    return f"{target.name}-" + hashlib.sha1(f"{url}@{salt}".encode()).hexdigest()[:10]


def _snapshot_plain_folder(target: Target, local: Path) -> Path:
    """Copy a plain folder into a git repository with one commit (so it has a base sha)."""
    key = _cache_key(target, str(local), tree_hash(local))  # edited folder => fresh snapshot
    dest = cache_dir() / "snapshots" / key
    with _locked(dest.with_suffix(".lock")):
        if dest.exists():
            return dest
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(local, tmp, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        if has_git():
            _git(tmp, "init", "-q", "-b", target.base)
            _git(tmp, "add", "-A")
            _git(tmp, "commit", "-q", "-m", "kernelsmith: snapshot of the bundled source")
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
            if not has_git() or importlib.util.find_spec("git") is None:
                # Without gitpython (the GPU box) the one-commit snapshot itself is the checkout.
                sha, is_git = head_sha(snap)
                return Checkout(snap, sha, is_git)
            url = str(snap)
    return _worktree_checkout(target, url, setup)


def _worktree_checkout(target: Target, url: str, setup: bool = True) -> Checkout:
    """Clone or fetch `url` into the cache, then a clean worktree at the tip of `base`."""
    try:
        import git  # gitpython: imported here so the referee and --checkout work without it
    except ImportError:
        raise KernelsmithError("cloning a target needs GitPython (pip install GitPython); "
                               "or pass --checkout DIR with a prepared checkout") from None
    key = _cache_key(target, url)
    bare = cache_dir() / "repos" / f"{key}.git"
    with _locked(bare.with_suffix(".lock")):
        repo = _clone_or_fetch(git, url, bare, target)
        sha = repo.commit(f"refs/remotes/origin/{target.base}").hexsha
        wt = cache_dir() / "worktrees" / key / sha[:12]
        _ensure_worktree(repo, wt, sha)
        _prune_worktrees(repo, wt.parent, keep=wt)
    if setup and target.setup:
        run_setup(target, wt)
    return Checkout(wt, sha, True)


def _clone_or_fetch(git, url: str, bare: Path, target: Target):
    refspec = f"+refs/heads/{target.base}:refs/remotes/origin/{target.base}"
    try:
        if bare.exists():
            repo = git.Repo(bare)
        else:
            bare.parent.mkdir(parents=True, exist_ok=True)
            repo = git.Repo.init(bare, bare=True)
            repo.create_remote("origin", url)
        with repo.git.custom_environment(GIT_TERMINAL_PROMPT="0"):
            repo.remotes.origin.fetch(refspec)
    except git.GitCommandError as e:
        raise ConfigError(target.path, f"cannot fetch branch {target.base!r} from {url}: "
                          f"{(e.stderr or str(e)).strip()}", "base") from None
    return repo


def _ensure_worktree(repo, wt: Path, sha: str) -> None:
    """A clean worktree at `sha`, as new: nothing an earlier run left in it survives."""
    if wt.exists() and (wt / ".git").exists():
        # Tracked edits are reverted and every untracked or ignored file goes too (-ffdx): a file
        # planted by an earlier run's setup or tests never reaches this run. Setup then runs again.
        repo.git.execute(["git", "-C", str(wt), "reset", "-q", "--hard", sha])
        repo.git.execute(["git", "-C", str(wt), "clean", "-q", "-ffdx"])
        return
    shutil.rmtree(wt, ignore_errors=True)
    repo.git.worktree("prune")
    wt.parent.mkdir(parents=True, exist_ok=True)
    repo.git.worktree("add", "--detach", "-f", str(wt), sha)


def _prune_worktrees(repo, folder: Path, keep: Path) -> None:
    """Keep the newest KEEP_WORKTREES worktrees of this repository, remove older ones."""
    trees = sorted((p for p in folder.iterdir() if p.is_dir() and p != keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in trees[KEEP_WORKTREES - 1:]:
        try:
            repo.git.worktree("remove", "--force", str(old))
        except Exception:  # a worktree another process still uses stays; prune catches it later
            continue


@contextmanager
def clean_worktree(checkout: Path, base_sha: str, dest: Path):
    """A clean copy of `checkout` at `base_sha` in `dest` (git worktree, or a plain copy without git).

    A plain copy is only trusted when its content hash still equals `base_sha`.
    """
    checkout, dest = Path(checkout), Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if is_commit(base_sha):
        if not has_git():
            raise KernelsmithError(f"{checkout}: base {base_sha[:12]} is a git commit, but git is missing")
        _git(checkout, "worktree", "add", "--detach", "-f", str(dest), base_sha)
        try:
            yield dest
        finally:
            _git(checkout, "worktree", "remove", "--force", str(dest), check=False)
            shutil.rmtree(dest, ignore_errors=True)
            _git(checkout, "worktree", "prune", check=False)
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
        shutil.rmtree(dest, ignore_errors=True)
