"""Git side of publishing: one bot-authored commit on top of the run's base, pushed over HTTPS.

Works in a private bare repository (no work tree, no checkout of target code, nothing executed
from it); every git command goes through kernelsmith.gitsafe (the repository named explicitly, hooks
and fsmonitor off, no system or global configuration, no inherited GIT_* variable). The token
travels in an `http.extraHeader` set through the environment of each git call, never in a URL, a
remote's config or a command line. The runner has no git identity: author and
committer are set explicitly to the bot's.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith import gitsafe
from kernelsmith.errors import KernelsmithError
from kernelsmith.onboard.checkout import BOT_AUTHOR

_SHA_RE = re.compile(r"[0-9a-f]{40}\Z")


class GitError(KernelsmithError):
    """A git step of publishing failed (the message never contains the token)."""


@dataclass
class BranchUpdate:
    """What happened to the bot branch: pushed (new or force-pushed), unchanged, or blocked."""

    action: str                     # "created" | "updated" | "unchanged" | "blocked"
    sha: str                        # the branch head after this step (the bot's commit unless blocked)
    foreign: list[str] = field(default_factory=list)  # commits on the branch by someone else


def _env(token: str | None) -> dict:
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": ""}
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"})
    return env


class Publisher:
    """A scratch bare repository that fetches the base, builds the commit and pushes the branch."""

    def __init__(self, workdir: Path, server_url: str, base_repo: str, push_repo: str, token_fn):
        workdir.mkdir(parents=True, exist_ok=True)
        self.git_dir = Path(workdir)
        if not (self.git_dir / "HEAD").is_file():
            self._run("init", "-q", "--bare", "--template=", str(workdir), repo=None, cwd=workdir)
        self.names = {"base": base_repo, "push": push_repo}
        self.base_url = push_url(server_url, base_repo)
        self.token_fn = token_fn  # owner/name -> a currently valid token for it
        self._remote("base", self.base_url)
        self._remote("push", push_url(server_url, push_repo))

    def _remote(self, name: str, url: str) -> None:
        if gitsafe.ok(self.git_dir, "config", "--get", f"remote.{name}.url"):
            self._run("remote", "set-url", name, url)
        else:
            self._run("remote", "add", name, url)

    def _run(self, *args: str, remote: str | None = None, env: dict | None = None, repo: str = "own",
             cwd: Path | None = None, text: bool = True) -> str | bytes:
        """git on this scratch repository (`repo=None`: none yet, for `init`), through gitsafe."""
        full_env = _env(self.token_fn(self.names[remote]) if remote else None)
        full_env.update(env or {})
        try:
            proc = gitsafe.run(self.git_dir if repo == "own" else None, *args, env=full_env, cwd=cwd,
                               text=text)
        except gitsafe.GitFailed as e:
            err = e.stderr.strip().replace("\n", " ")[-400:]
            raise GitError(f"git {args[0]} failed: {err}") from None
        return proc.stdout.strip() if text else proc.stdout

    def fetch_base(self, base_branch: str, base_sha: str | None = None) -> str:
        """Fetch the base branch (commits and trees only); returns its tip. With `base_sha`, require
        that commit to be on the branch: any other commit the server would hand out by id (a fork's
        PR head, say) would bring its whole tree into the bot's branch as the commit's parent."""
        # Blobs are left out (a partial clone): the commit only needs the base's trees.
        self._run("fetch", "--quiet", "--filter=blob:none", "--no-tags", "base",
                  f"+refs/heads/{base_branch}:refs/remotes/base/{base_branch}", remote="base")
        tip = self._run("rev-parse", f"refs/remotes/base/{base_branch}^{{commit}}")
        if base_sha is not None:
            self.require_on_branch(base_sha, base_branch)
        return tip

    def require_on_branch(self, sha: str, base_branch: str) -> None:
        """GitError unless `sha` is a commit of the fetched base branch (the tip or an ancestor)."""
        ok = bool(_SHA_RE.match(sha or "")) and self._has_commit(sha)
        if ok:
            try:
                self._run("merge-base", "--is-ancestor", sha, f"refs/remotes/base/{base_branch}")
            except GitError:
                ok = False
        if not ok:
            raise GitError(f"the run's base commit {str(sha)[:40]} is not on `{base_branch}` of "
                           f"{self.names['base']}; refused (the bot commits only on top of its base branch)")

    def mode_at(self, rev: str, file_rel: str) -> str | None:
        """The git mode of `file_rel` at `rev` (100644, 100755, 120000 for a symlink...), None if absent."""
        listing = self._run("ls-tree", rev, "--", file_rel)
        return listing.split()[0] if listing else None

    def _has_commit(self, sha: str) -> bool:
        try:
            self._run("cat-file", "-e", f"{sha}^{{commit}}")
            return True
        except GitError:
            return False

    def fetch_branch(self, branch: str) -> str | None:
        """The current head of the bot branch on the push remote, or None if it does not exist."""
        out = self._run("ls-remote", "--heads", "push", f"refs/heads/{branch}", remote="push")
        if not out.strip():
            return None
        self._run("fetch", "--quiet", "--filter=blob:none", "--no-tags", "push",
                  f"+refs/heads/{branch}:refs/remotes/push/{branch}", remote="push")
        return out.split()[0]

    def build_commit(self, base_sha: str, file_rel: str, content: bytes, message: str) -> str:
        """A commit whose parent is `base_sha` and whose tree is the base's with `file_rel` replaced."""
        index = self.git_dir / "kernelsmith.index"
        index.unlink(missing_ok=True)
        ienv = {"GIT_INDEX_FILE": str(index)}
        self._run("read-tree", base_sha, env=ienv)
        staged = self.git_dir / "kernelsmith.blob"
        staged.write_bytes(content)
        blob = self._run("hash-object", "-w", "--no-filters", str(staged))
        mode = "100644"
        listing = self._run("ls-tree", base_sha, "--", file_rel)
        if listing:
            mode = listing.split()[0]
        self._run("update-index", "--add", "--cacheinfo", f"{mode},{blob},{file_rel}", env=ienv)
        tree = self._run("write-tree", "--missing-ok", env=ienv)
        name, email = BOT_AUTHOR
        ident = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
                 "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
        return self._run("commit-tree", tree, "-p", base_sha, "-m", message, env=ident)

    def foreign_commits(self, base_branch: str, branch: str) -> list[str]:
        """Commits on the branch (not on the base branch) whose author is not the bot."""
        span = f"refs/remotes/base/{base_branch}..refs/remotes/push/{branch}"
        out = self._run("log", "--format=%H %ae", span)
        email = BOT_AUTHOR[1]
        return [line.split()[0] for line in out.splitlines() if line.strip() and line.split()[1] != email]

    def has_commit(self, sha: str) -> bool:
        """True when the commit is in the scratch repository (fetched already)."""
        return self._has_commit(sha)

    def parent(self, rev: str) -> str:
        """The first parent of a commit."""
        return self._run("rev-parse", f"{rev}^")

    def tree_of(self, rev: str) -> str:
        """The tree id of a commit."""
        return self._run("rev-parse", f"{rev}^{{tree}}")

    def file_at(self, rev: str, file_rel: str) -> bytes | None:
        """A file's bytes at a commit (its blob is fetched on demand from the partial clone)."""
        try:  # the exact bytes (they are hashed); a lazy fetch of the blob needs the token
            return self._run("cat-file", "blob", f"{rev}:{file_rel}", remote="base", text=False)
        except GitError:
            return None

    def update_branch(self, branch: str, base_branch: str, base_sha: str, file_rel: str, content: bytes,
                      message: str) -> BranchUpdate:
        """Create the bot branch, or force-push it when every commit on it is the bot's (after fetch_base)."""
        old = self.fetch_branch(branch)
        new = self.build_commit(base_sha, file_rel, content, message)
        if old is not None:
            foreign = self.foreign_commits(base_branch, branch)
            if foreign:
                return BranchUpdate("blocked", old, foreign)
            parent = self._run("rev-parse", f"{old}^") if old else ""
            if self.tree_of(old) == self.tree_of(new) and parent == base_sha:
                return BranchUpdate("unchanged", old)
        # --force-with-lease: refuse if the branch moved since we looked (someone pushed meanwhile).
        lease = f"--force-with-lease=refs/heads/{branch}:{old or ''}"
        self._run("push", "--quiet", lease, "push", f"{new}:refs/heads/{branch}", remote="push")
        return BranchUpdate("created" if old is None else "updated", new)


def push_url(server_url: str, full_name: str) -> str:
    """The HTTPS clone URL of owner/name on the server at `server_url` (github.com or GHES)."""
    return f"{server_url.rstrip('/')}/{full_name}.git"


_GITHUB_CREDENTIALS = {"KERNELSMITH_TOKEN", "KERNELSMITH_APP_PRIVATE_KEY", "KERNELSMITH_APP_ID"}


def scrubbed(env: dict | None = None) -> dict:
    """A copy of the environment for the kernelsmith steps: the one scrubber (kernelsmith.sandbox)
    minus GitHub and Actions credentials, keeping the kernelsmith settings and the LLM key, which
    `optimize` hands to its LLM broker before any target code runs (and then drops)."""
    from kernelsmith.sandbox import scrubbed_env

    src = dict(os.environ if env is None else env)
    keep = tuple(k for k, v in src.items() if k.startswith(("KERNELSMITH_", "OPENAI_"))
                 and k not in _GITHUB_CREDENTIALS and not v.startswith(("ghs_", "ghp_", "gho_", "ghu_",
                                                                        "ghr_", "github_pat_")))
    return {k: v for k, v in scrubbed_env(src, keep=keep).items() if not k.startswith("GIT_CONFIG_")}
