"""`/kernelsmith rebase` on a bot PR: find the PR's winner and queue its replay on the current base.
A mixin of bot.app.Bot. Only a PR from the bot's own branch in its push repository qualifies (its
marker alone does not: anyone can paste one); the winner is read with git, nothing is executed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelsmith.target.config import Target

from .commands import HELP
from .publish import BRANCH_PREFIX, PublishError, read_marker

if TYPE_CHECKING:
    from .work import Reply


class RebaseCommand:
    """Bot's rebase command (see the module doc)."""

    def _rebase_pr(self, repo, issue, reply: Reply):
        """(pull request, marker, target name, op) of the open bot PR a rebase was asked on, else
        None after answering. Only a PR from a kernelsmith/<target>/<op> branch qualifies; the
        operator comes from its hidden marker, or from the branch name when the body lost it."""
        pr = repo.get_pull(issue.number) if issue.pull_request is not None else None
        ref = pr.head.ref if pr is not None else ""
        target = op = None
        marker: dict = {}
        if ref.startswith(BRANCH_PREFIX) and ref.count("/") == 2:
            marker = read_marker(pr.body) or {}
            target, op = ref[len(BRANCH_PREFIX):].split("/")
            target, op = marker.get("target") or target, marker.get("op") or op
        if not op:
            reply.set("❓ `rebase` works on a kernelsmith pull request (this is not one).", HELP)
            return None
        if pr.state != "open":
            how = "merged" if pr.merged_at is not None else "closed"
            reply.set(f"🚫 **not rebased**: PR #{pr.number} is {how}; `rebase` works on an open kernelsmith "
                      f"pull request. `/kernelsmith optimize {op}` starts a new search.")
            return None
        return pr, marker, target, op

    def _queue_rebase(self, reply: Reply, repo_name: str, target: Target, op, pr, marker: dict):
        """Read the PR's winner (its diff against the base it was made on) and queue its replay."""
        from .gitops import GitError
        from .remote import winner_diff
        from .work import WorkItem

        if pr.head.repo is None or pr.head.repo.full_name != (target.fork or target.repo):
            reply.set(f"🚫 **not rebased**: PR #{pr.number} does not come from the bot's branch in "
                      f"`{target.fork or target.repo}`.")
            return []
        try:
            diff, head = winner_diff(self.auth, self.env.server_url, target, pr.head.ref, op.file,
                                     marker.get("base_sha"))
        except (PublishError, GitError) as e:
            reply.set(f"❌ **cannot rebase**: {e}")
            return []
        reply.set(f"⏳ **queued**: rebase of PR #{pr.number} (`{target.name}/{op.name}`): its winner "
                  f"({head[:12]}) re-applied to the current `{target.base}`, re-measured and verified"
                  + self._run_link())
        self._replies[(target.name, op.name)] = reply
        return [WorkItem(target.name, op.name, None, None, target.repo, dict(reply.ref(), repo=repo_name),
                         notes=[f"rebase of PR #{pr.number}"], replay=diff, pr=pr.number)]
