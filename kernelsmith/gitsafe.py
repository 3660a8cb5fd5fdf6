"""Every git command a trusted process runs goes through here.

A target's `setup` and its tests may write their checkout, `.git` included (a hook, `core.fsmonitor`,
`include.path`, a `gitdir:` line pointing elsewhere). So git is never left to discover its repository
from a folder: the repository is named with `--git-dir` (a store untrusted code cannot write), the
command runs with that store as its working folder, and hooks, fsmonitor, automatic gc and the
`ext::` transport are switched off on the command line (which outranks any repository config). No
system or global configuration is read, and no inherited `GIT_*` variable (GIT_DIR, GIT_WORK_TREE,
GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF, ...) reaches git: only those the caller passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.sandbox import spawn

# Command-line configuration outranks the repository's, so a planted key cannot turn these back on.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",          # no hook runs (post-checkout, reference-transaction, ...)
    "core.fsmonitor=false",              # no fsmonitor command
    "core.untrackedCache=false",
    "gc.auto=0",                         # no background `gc --auto` / maintenance
    "maintenance.auto=false",
    "protocol.ext.allow=never",          # no `ext::<command>` remote
    "submodule.recurse=false",
    "credential.helper=",                # no helper program (the token, where needed, is a header)
    "core.askPass=",
)
# The transport choice of the operator (fetching over ssh) is the only GIT_* variable kept.
_KEEP_ENV = ("GIT_SSH", "GIT_SSH_COMMAND")


class GitFailed(KernelsmithError):
    """A git command exited non-zero (the message names the command and git's error)."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


def has_git() -> bool:
    """Whether the git command line is available."""
    return shutil.which("git") is not None


def safe_env(extra: dict | None = None, base: dict | None = None) -> dict:
    """`base` (default: this process's environment) without any GIT_* variable, plus no system or
    global configuration, no terminal prompt, and `extra` (the caller's own GIT_* settings)."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if not k.startswith("GIT_") or k in _KEEP_ENV}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
                "GIT_OPTIONAL_LOCKS": "0"})
    env.update(extra or {})
    return env


def argv(git_dir: str | os.PathLike | None, *args: str,
         work_tree: str | os.PathLike | None = None) -> list[str]:
    """The full command line: git, the safe configuration, the explicit repository, then `args`."""
    cmd = ["git"]
    for item in SAFE_CONFIG:
        cmd += ["-c", item]
    if git_dir is not None:
        cmd.append(f"--git-dir={os.fspath(git_dir)}")
    if work_tree is not None:
        cmd.append(f"--work-tree={os.fspath(work_tree)}")
    return cmd + [os.fspath(a) for a in args]


def run(git_dir: str | os.PathLike | None, *args: str, work_tree: str | os.PathLike | None = None,
        cwd: str | os.PathLike | None = None, env: dict | None = None, check: bool = True,
        text: bool = True, input: str | bytes | None = None) -> subprocess.CompletedProcess:
    """Run git on the repository `git_dir` (None only for `init` and `ls-remote`-like commands that
    need none); the working folder is `cwd`, else `git_dir`, never a folder git would search."""
    if not has_git():
        raise GitFailed("the git command line is not installed")
    where = cwd if cwd is not None else git_dir
    if where is not None and not os.path.isdir(where):
        where = os.path.dirname(os.path.abspath(where))  # a `.git` file: its folder
    if where is None:
        raise GitFailed(f"git {args[0] if args else ''}: no repository and no working folder given")
    proc = spawn.run(argv(git_dir, *args, work_tree=work_tree), None, env=safe_env(env), cwd=where,
                     input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text)
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode("utf-8", "replace")
        shown = " ".join(str(a) for a in args[:4])
        raise GitFailed(f"git {shown} failed in {git_dir or where}: {err.strip()[-400:]}", err)
    return proc


def out(git_dir: str | os.PathLike | None, *args: str, **kw) -> str:
    """git's standard output, stripped (see run)."""
    return run(git_dir, *args, **kw).stdout.strip()


def ok(git_dir: str | os.PathLike | None, *args: str, **kw) -> bool:
    """Whether the git command exits 0 (see run)."""
    return run(git_dir, *args, check=False, **kw).returncode == 0


def worktree_meta(store: Path, tree: Path) -> Path | None:
    """The store's own record (`<store>/worktrees/<id>`) of the worktree at `tree`, found from the
    store's side (its `gitdir` file), never from the tree's `.git`, which untrusted code could rewrite."""
    root = Path(store) / "worktrees"
    want = os.path.abspath(os.path.join(tree, ".git"))
    if not root.is_dir():
        return None
    for meta in sorted(root.iterdir()):
        gitdir = meta / "gitdir"
        try:
            if not meta.is_symlink() and gitdir.is_file() and not gitdir.is_symlink():
                if os.path.abspath(gitdir.read_text().strip()) == want:
                    return meta
        except OSError:
            continue
    return None
