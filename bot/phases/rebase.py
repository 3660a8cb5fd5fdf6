"""`/kernelsmith rebase` on a bot PR: find the PR's winner and queue its replay on the current base.
Only a PR from the bot's own branch in its push repository qualifies (its marker alone does not:
anyone can paste one); the winner is read with git, nothing is executed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelsmith.onboard.config import Target

from ..commands import HELP
from ..pullrequest import BRANCH_PREFIX, PublishError, read_marker
from ..work import WorkItem
from .replies import Reply, keep, run_link, text

if TYPE_CHECKING:
    from ..context import Context


def find_pr(repo, issue, reply: Reply):
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
        reply.set(text("not_a_bot_pr"), HELP)
        return None
    if pr.state != "open":
        how = "merged" if pr.merged_at is not None else "closed"
        reply.set(text("pr_not_open", number=pr.number, how=how, op=op))
        return None
    return pr, marker, target, op


def queue(ctx: Context, reply: Reply, repo_name: str, target: Target, op, pr, marker: dict) -> list[WorkItem]:
    """Read the PR's winner (its diff against the base it was made on) and queue its replay."""
    from ..gitops import GitError
    from ..remote import winner_diff

    push_repo = target.fork or target.repo
    if pr.head.repo is None or pr.head.repo.full_name != push_repo:
        reply.set(text("not_from_bot_branch", number=pr.number, push_repo=push_repo))
        return []
    try:
        diff, head = winner_diff(ctx.auth, ctx.env.server_url, target, pr.head.ref, op.file,
                                 marker.get("base_sha"))
    except (PublishError, GitError) as e:
        reply.set(text("cannot_rebase", error=e))
        return []
    reply.set(text("rebase_queued", number=pr.number, target=target.name, op=op.name, head=head[:12],
                   base=target.base, run_link=run_link(ctx.env.run_url)))
    keep(ctx, target.name, op.name, reply)
    return [WorkItem(target.name, op.name, None, None, target.repo, dict(reply.ref(), repo=repo_name),
                     notes=[f"rebase of PR #{pr.number}"], replay=diff, pr=pr.number)]
