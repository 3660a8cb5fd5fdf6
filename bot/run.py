"""`kernelsmith-bot run`: the GitHub Actions entry for schedule, workflow_dispatch and issue_comment.

It runs the phases of bot/phases/ in order; the workflow puts the three stages in separate jobs:
- gate (hosted runner, a token that can comment, runs no target code): the event → the work list
  (phases/gate.py; a comment's permission first, then phases/comment.py and phases/rebase.py;
  a schedule: phases/schedule.py).
- optimize (GPU runner, no GitHub credential): `kernelsmith optimize` + `verify` per work item
  (in the workflow its own job; with `--stage all`, phases/optimize.py in token-free subprocesses).
- publish (hosted runner, write token, runs no target or candidate code): each verified run → its
  PR, the state, the reply, the dashboard (phases/publish.py, also behind `kernelsmith-bot publish`).
"""

from __future__ import annotations

from pathlib import Path

from .actions import ActionsEnv
from .context import Context
from .phases import gate, optimize, publish
from .work import WorkItem


class Bot:
    """One run of the bot over one Actions event: the phases in order, sharing one Context."""

    def __init__(self, env: ActionsEnv, auth, engine, *, targets: str | None = None,
                 runs_dir: Path | None = None, dry_run: bool = False, log=None):
        self.ctx = Context(env, auth, engine, targets=targets, runs_dir=runs_dir, dry_run=dry_run, log=log)

    def gate(self) -> list[WorkItem]:
        """Stage 1 (the gate job): the work list for this event."""
        return gate.work_items(self.ctx)

    def publish_stage(self, items: list[WorkItem]) -> int:
        """Stage 3 (the publish job): publish the run directories of the gate's work list."""
        return publish.publish_all(self.ctx, items)

    def run_all(self) -> int:
        """All stages in this process: gate, then optimize + verify (token-free) and publish per item."""
        items = self.gate()
        repos = {i.repo for i in items if i.repo}
        self.ctx.pull_state(repos)
        failures = 0
        for item in items:
            run_dir = optimize.run(self.ctx, item)
            failures += not publish.finish(self.ctx, item, run_dir)
        self.ctx.push_state(repos)
        return 1 if failures else 0
