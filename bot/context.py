"""What the phases of one bot run share: the Actions environment, credentials, the targets, the
per-operator state (mirrored on each repository's dashboard issue) and the reply comments
(bot/phases/replies.py finds and keeps them)."""

from __future__ import annotations

import sys
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.onboard.config import Target, load_target, targets_dir
from kernelsmith.onboard.state import load_state, save_state

from . import dashboard, prs
from .actions import ActionsEnv


class Context:
    """One bot run's shared parts; every remote call goes through `auth` (none at all in dry-run)."""

    def __init__(self, env: ActionsEnv, auth, engine=None, *, targets: str | None = None,
                 runs_dir: Path | None = None, dry_run: bool = False, log=None):
        self.env, self.auth, self.engine = env, auth, engine
        self.targets_dir = targets_dir(targets)
        self.runs_dir = Path(runs_dir or "runs").resolve()
        self.dry_run = dry_run
        self.log = log or (lambda text: print(text, file=sys.stderr))
        self.state = load_state()
        self.scans: dict[str, dict] = {}
        self.replies: dict[tuple, object] = {}  # (target, op) -> its phases.replies.Reply
        self.extra_targets: list[Target] = []  # a yaml given by path to `kernelsmith-bot publish`
        self._pulled: set[str] = set()

    # ------------------------------------------------------------------ targets
    def targets(self) -> list[Target]:
        """Every target yaml in the targets folder (a broken one is reported and skipped)."""
        found = []
        for path in sorted(self.targets_dir.glob("*.y*ml")):
            try:
                found.append(load_target(path))
            except KernelsmithError as e:
                self.log(f"skipping {path}: {e}")
        names = {t.name for t in found}
        return found + [t for t in self.extra_targets if t.name not in names]

    def target(self, name: str) -> Target:
        """The target of that name; KernelsmithError when there is none."""
        for t in self.targets():
            if t.name == name:
                return t
        raise KernelsmithError(f"no target named {name!r} in {self.targets_dir}")

    # ------------------------------------------------------------------ state
    def pull_state(self, repos: set[str]) -> None:
        """Merge the state mirrored on each repo's dashboard into the local state (once per repo),
        then ask GitHub which recorded open PRs were merged or closed since."""
        for name in sorted(set(repos) - self._pulled):
            try:
                repo = self.auth.repo(name)
                issue = dashboard.find_dashboard(repo, self.auth.identity(name))
            except Exception as e:  # an unreachable repo must not stop the other targets
                self.log(f"cannot read the dashboard of {name}: {e}")
                continue
            self._pulled.add(name)
            if issue is not None:
                dashboard.merge_into(self.state, dashboard.read_block(issue.body))
            keys = dashboard.repo_keys([t for t in self.targets() if t.repo == name])
            try:
                for change in prs.refresh(self.state, repo, keys, self.log):
                    self.log(change)
            except Exception as e:  # the dashboard state is still usable without the refresh
                self.log(f"cannot read the pull requests of {name}: {e}")

    def push_state(self, repos: set[str]) -> None:
        """Save the state locally and mirror it on each repo's dashboard (not in dry-run)."""
        save_state(self.state)
        if self.dry_run:
            return
        all_targets = self.targets()
        for name in sorted(repos):
            ts = [t for t in all_targets if t.repo == name]
            scans = {t.name: self.scans[t.name] for t in ts if t.name in self.scans}
            dashboard.sync(self.auth.repo(name), ts, self.state, scans, self.env.run_url,
                           self.auth.identity(name))
