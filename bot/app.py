"""`kernelsmith-bot run`: the GitHub Actions entry for schedule, workflow_dispatch and issue_comment.

One run goes through up to three stages, which the workflow puts in separate jobs:
- gate (hosted runner, write token, runs no target code): read the event; for a comment, check
  the commenter's permission through the API first, then react, parse the command and answer it; for a
  schedule, scan the targets and pick the stale operators within the per-run budget. Its output is
  the work list (target, op, budget, minutes, reply comment).
- optimize (GPU runner, no write token): `kernelsmith optimize` + `kernelsmith verify` per entry.
- publish (hosted runner, write token, runs no target or candidate code): publish each verified
  run, record the state, edit the reply comment, refresh the dashboard (bot/stage_publish.py).
`--stage all` runs the three in one process, with optimize and verify in token-free subprocesses.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.target.config import Target, load_target, targets_dir
from kernelsmith.target.state import entry, load_state, save_state, set_ignored, staleness

from . import dashboard, prs
from .commands import HELP, CommandError, addresses_bot, parse_command
from .rebase import RebaseCommand
from .stage_publish import PublishStage
from .work import Reply, WorkItem  # noqa: F401 (named here too: bot.cli, tests)

DEFAULT_OP_MINUTES = 30.0
DEFAULT_RUN_MINUTES = 60.0
ALLOWED_ROLES = {"write", "maintain", "admin"}


@dataclass
class ActionsEnv:
    """What GitHub Actions tells a step through its environment."""

    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    repository: str | None = None
    event_name: str | None = None
    event_path: str | None = None
    step_summary: str | None = None
    output: str | None = None
    run_url: str | None = None

    @classmethod
    def from_env(cls, env=None) -> ActionsEnv:
        """Read GITHUB_* variables (defaults: github.com)."""
        env = os.environ if env is None else env
        server = (env.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/")
        repo, run_id = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
        return cls(api_url=(env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
                   server_url=server, repository=repo, event_name=env.get("GITHUB_EVENT_NAME"),
                   event_path=env.get("GITHUB_EVENT_PATH"), step_summary=env.get("GITHUB_STEP_SUMMARY"),
                   output=env.get("GITHUB_OUTPUT"),
                   run_url=f"{server}/{repo}/actions/runs/{run_id}" if repo and run_id else None)


class Bot(RebaseCommand, PublishStage):
    """Handles one Actions event; every remote call goes through `auth` (none at all in dry-run)."""

    def __init__(self, env: ActionsEnv, auth, engine, *, targets: str | None = None,
                 runs_dir: Path | None = None, dry_run: bool = False, log=None):
        self.env, self.auth, self.engine = env, auth, engine
        self.targets_dir = targets_dir(targets)
        self.runs_dir = Path(runs_dir or "runs").resolve()
        self.dry_run = dry_run
        self.log = log or (lambda text: print(text, file=sys.stderr))
        self.state = load_state()
        self.scans: dict[str, dict] = {}
        self._replies: dict[tuple, Reply] = {}
        self._pulled: set[str] = set()

    # ------------------------------------------------------------------ targets and state
    def targets(self) -> list[Target]:
        """Every target yaml in the targets folder (a broken one is reported and skipped)."""
        found = []
        for path in sorted(self.targets_dir.glob("*.y*ml")):
            try:
                found.append(load_target(path))
            except KernelsmithError as e:
                self.log(f"skipping {path}: {e}")
        return found

    def target(self, name: str) -> Target:
        for t in self.targets():
            if t.name == name:
                return t
        raise KernelsmithError(f"no target named {name!r} in {self.targets_dir}")

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

    # ------------------------------------------------------------------ entry
    def event(self) -> dict:
        if not self.env.event_path or not Path(self.env.event_path).is_file():
            return {}
        return json.loads(Path(self.env.event_path).read_text())

    def gate(self) -> list[WorkItem]:
        """Stage 1: the work list for this event (answers help/ignore/refusals itself)."""
        name, payload = self.env.event_name, self.event()
        if name in ("schedule", "workflow_dispatch"):
            return self.plan_schedule(payload.get("inputs") or {})
        if name == "issue_comment":
            return self.on_comment(payload)
        self.log(f"kernelsmith-bot: nothing to do for event {name!r}")
        return []

    def run_all(self) -> int:
        """All stages in this process: gate, then optimize + verify (token-free) and publish."""
        items = self.gate()
        self.pull_state({i.repo for i in items if i.repo})
        failures = 0
        for item in items:
            reply = self._reply_for(item)
            if reply:
                doing = ("re-applying the winner to the current base, re-measuring and verifying"
                         if item.replay is not None else "optimizing and verifying")
                reply.set(f"🔄 **running**: {doing}" + self._run_link())
            out = self.runs_dir / item.slug
            if out.exists():  # an earlier run on a long-lived runner: keep it, start afresh
                out.rename(_aside(out))
            target = self.target(item.target)
            if item.replay is not None:
                diff = self.runs_dir / f"{item.slug}.replay.diff"
                diff.parent.mkdir(parents=True, exist_ok=True)
                diff.write_text(item.replay)
                code = self.engine.optimize(target.path, item.op, out, None, item.minutes, replay=diff)
            else:
                code = self.engine.optimize(target.path, item.op, out, item.budget, item.minutes)
            if code == 0:
                self.engine.verify(out)
            failures += not self.finish(item, out)
        self.push_state({i.repo for i in items if i.repo})
        return 1 if failures else 0

    def _run_link(self) -> str:
        return f" ([workflow run]({self.env.run_url}))" if self.env.run_url else ""

    # ------------------------------------------------------------------ schedule
    def plan_schedule(self, inputs: dict) -> list[WorkItem]:
        """Stale, watched operators of every target (or the one asked for), within each run budget."""
        only_target, only_op = inputs.get("target") or None, inputs.get("op") or None
        budget = int(inputs["budget"]) if str(inputs.get("budget") or "").strip() else None
        targets = [t for t in self.targets() if only_target in (None, t.name)]
        if only_target and not targets:
            raise KernelsmithError(f"no target named {only_target!r} in {self.targets_dir}")
        self.pull_state({t.repo for t in targets})
        items = []
        for t in targets:
            scan = self.engine.scan(t.path)
            self.scans[t.name] = scan
            left = t.budget_minutes or DEFAULT_RUN_MINUTES
            for row in scan.get("operators", []):
                name = row.get("name")
                if only_op and name != only_op:
                    continue
                stale, why = staleness(self.state, t.name, name, row.get("source_hash") or "")
                ignored = entry(self.state, t.name, name).get("ignored")
                asked = only_op is not None
                closed = prs.declined(entry(self.state, t.name, name), row.get("source_hash"))
                if closed and not asked:
                    self.log(f"{t.name}/{name}: PR #{closed.get('number')} was closed without merging at "
                             "this source; not proposed again until the source changes")
                    continue
                skip = (ignored or not stale) and not asked
                if not row.get("harness_ok", True) or skip:
                    continue
                minutes = min(DEFAULT_OP_MINUTES, left)
                if minutes <= 0:
                    self.log(f"{t.name}/{name}: stale ({why}) but over this run's budget; next run")
                    continue
                left -= minutes
                items.append(WorkItem(t.name, name, budget, minutes, t.repo, None, row.get("source_hash"),
                                      [why]))
        return items

    # ------------------------------------------------------------------ comments
    def on_comment(self, payload: dict) -> list[WorkItem]:
        """React, check permission, parse and answer a `/kernelsmith` comment."""
        comment = payload.get("comment") or {}
        user = (comment.get("user") or {})
        if payload.get("action") != "created" or user.get("type") == "Bot":
            return []
        if not addresses_bot(comment.get("body")):
            return []
        repo_name = (payload.get("repository") or {}).get("full_name") or self.env.repository
        repo = self.auth.repo(repo_name)
        login = user.get("login", "")
        # The permission is asked first: nothing is written for anyone before it is known.
        role = self.role(repo, login)
        number = (payload.get("issue") or {}).get("number")
        issue = repo.get_issue(number)
        gh_comment = issue.get_comment(comment["id"])
        gh_comment.create_reaction("eyes")
        reply = Reply(issue, f"> `{_quote_cmd(comment.get('body'))}` — @{login}")
        if role not in ALLOWED_ROLES:
            reply.set(f"🚫 **refused**: kernelsmith commands need write, maintain or admin permission on "
                      f"`{repo_name}`; @{login} has `{role}`.")
            return []
        try:
            cmd = parse_command(comment.get("body"))
        except CommandError as e:
            reply.set(f"❓ {e}", HELP)
            return []
        if cmd.name == "help":
            reply.set("ℹ️ help", HELP)
            return []
        targets = self._targets_for(repo_name)
        pr = marker = None
        if cmd.name == "rebase":
            found_pr = self._rebase_pr(repo, issue, reply)
            if found_pr is None:
                return []
            pr, marker, cmd_target, cmd_op = found_pr
        else:
            cmd_op, cmd_target = cmd.op, None
        found = [(t, o) for t in targets for o in t.operators
                 if o.name == cmd_op and cmd_target in (None, t.name)]
        # An operator of the repo's own .kernelsmith.yml carries the repo name as its branch target.
        found = found or [(t, o) for t in targets for o in t.operators if o.name == cmd_op]
        if not found:
            known = ", ".join(f"`{o.name}`" for t in targets for o in t.operators) or "none"
            reply.set(f"❓ Unknown operator `{cmd_op}`. Known operators: {known}.", HELP)
            return []
        target, op = found[0]
        if cmd.name == "ignore":
            self.pull_state({target.repo})
            set_ignored(self.state, target.name, op.name, True)
            self.push_state({target.repo})
            reply.set(f"🙈 **ignored**: scheduled runs skip `{op.name}` from now on "
                      f"(`/kernelsmith optimize {op.name}` still works).")
            return []
        if cmd.name == "rebase":
            return self._queue_rebase(reply, repo_name, target, op, pr, marker)
        reply.set(f"⏳ **queued**: {cmd.describe()} (`{target.name}/{op.name}`)" + self._run_link())
        self._replies[(target.name, op.name)] = reply
        return [WorkItem(target.name, op.name, cmd.budget, cmd.minutes, target.repo,
                         dict(reply.ref(), repo=repo_name))]

    def role(self, repo, login: str) -> str:
        """The commenter's role on the repo, asked through the API (not author_association)."""
        from github import GithubException

        try:
            role = repo.get_collaborator_role_name(login)
            if role in ALLOWED_ROLES | {"read", "triage", "none"}:
                return role
            # A custom role: fall back to the legacy permission it maps to.
            return repo.get_collaborator_permission(login)
        except GithubException as e:
            if e.status == 404:
                return "none"
            raise

    def _targets_for(self, repo_name: str) -> list[Target]:
        """Targets of the repo the comment is in; all targets when the bot lives in its own repo."""
        all_targets = self.targets()
        mine = [t for t in all_targets if t.repo == repo_name]
        return mine or all_targets

    def _reply_for(self, item: WorkItem) -> Reply | None:
        if item.reply is None or item.reply.get("comment") is None or self.dry_run:
            return None
        key = (item.target, item.op)
        if key not in self._replies:
            repo = self.auth.repo(item.reply["repo"])
            issue = repo.get_issue(item.reply["issue"])
            comment = issue.get_comment(item.reply["comment"])
            header = comment.body.split("\n\n", 1)[0]
            self._replies[key] = Reply(issue, header, comment)
        return self._replies[key]


def _quote_cmd(body: str | None) -> str:
    """The first line of the command, shortened and stripped of backticks, for the reply header."""
    first = next((line.strip() for line in (body or "").splitlines() if line.strip()), "")
    return first.replace("`", "'")[:120]


def _aside(path: Path) -> Path:
    """A free name beside `path` (stamped with its mtime) to keep an earlier run directory."""
    stamp, n = int(path.stat().st_mtime), 0
    aside = path.with_name(f"{path.name}.{stamp}")
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.{stamp}-{n}")
    return aside
