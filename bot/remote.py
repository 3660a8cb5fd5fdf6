"""The remote half of publishing: branch, pull request, labels, check run or commit status."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .actions import write_summary
from .artifact import load_evidence, read_winner
from .auth import GitHubAuth
from .gitops import Publisher
from .prbody import with_marker
from .pullrequest import (
    BRANCH_PREFIX,
    REPO_CONFIG,
    Outcome,
    PublishError,
    PublishSpec,
    PullRequestDraft,
    check_publishable,
    commit_message,
    draft,
    marker,
    read_marker,
    unified_diff,
    with_repo_config,
)


def _find_pr(repo, d: PullRequestDraft):
    head = f"{d.push_repo.split('/')[0]}:{d.branch}"
    for pr in repo.get_pulls(state="open", head=head, base=d.base):
        return pr
    return None


def _declined_pr(repo, d: PullRequestDraft, src: str | None):
    """A PR of this branch that a maintainer closed without merging at this same source, or None."""
    if not src:
        return None
    head = f"{d.push_repo.split('/')[0]}:{d.branch}"
    for pr in repo.get_pulls(state="closed", head=head, base=d.base):
        if pr.merged_at is None and (read_marker(pr.body) or {}).get("source_hash") == src:
            return pr
    return None


def _open_bot_prs(repo, d: PullRequestDraft) -> int:
    """Open PRs from kernelsmith branches into this repo (paginated through Link headers)."""
    return sum(1 for pr in repo.get_pulls(state="open") if pr.head.ref.startswith(BRANCH_PREFIX))


def publish_remote(spec: PublishSpec, run_dir: Path, auth: GitHubAuth, server_url: str, *,
                   summary: str | None = None, workdir: Path | None = None,
                   max_open_prs: int | None = None) -> Outcome:
    """Push the bot branch and open or update its PR; never more than one PR per operator.

    The base file, the diff and the commit's parent come from the base branch itself: the run's
    base_sha must be on it, and the file to replace must be a plain file there."""
    from github import GithubException

    from kernelsmith.onboard.state import source_hash

    run_dir = Path(run_dir)
    ev = load_evidence(run_dir)
    if spec.file is not None:  # refuse what is not publishable before any request
        check_publishable(ev, read_winner(run_dir, spec.file), spec.min_speedup)
    tmp = tempfile.TemporaryDirectory(prefix="kernelsmith-publish-") if workdir is None else None
    root = Path(tmp.name) if tmp else workdir
    try:
        pub = Publisher(root / "git", server_url, spec.repo, spec.target.fork or spec.repo,
                        token_fn=auth.push_token)
        tip = pub.fetch_base(spec.target.base)
        if spec.file is None:
            config = pub.file_at(tip, REPO_CONFIG)
            spec = with_repo_config(spec, config.decode("utf-8", "replace") if config is not None else None)
        winner = read_winner(run_dir, spec.file)
        check_publishable(ev, winner, spec.min_speedup)
        pub.require_on_branch(ev.base_sha, spec.target.base)
        if pub.mode_at(ev.base_sha, spec.file) not in ("100644", "100755"):
            raise PublishError(f"`{spec.file}` is not a plain file at the run's base {ev.base_sha[:12]}; "
                               "publishing only replaces an existing file")
        base_code = pub.file_at(ev.base_sha, spec.file)
        src = source_hash(base_code)
        d = draft(spec, ev, winner, unified_diff(base_code.decode("utf-8", "replace"), winner, spec.file))
        repo = auth.repo(d.repo)
        existing = _find_pr(repo, d)
        if existing is None:
            cap = spec.target.max_open_prs if max_open_prs is None else max_open_prs
            open_now = _open_bot_prs(repo, d)
            if open_now >= cap:
                msg = (f"{d.repo} already has {open_now} open kernelsmith PRs (max_open_prs {cap}); "
                       f"not opening one for {d.op}")
                write_summary(summary, f"**kernelsmith**: {msg}")
                return Outcome("capped", msg, d.target, d.op)
        closed = _declined_pr(repo, d, src) if existing is None else None
        if closed is not None:
            # A maintainer said no to this operator at this source: no new PR, no push, no reopen.
            msg = (f"PR #{closed.number} for `{d.op}` was closed without merging at this source "
                   f"({src[:12]}); kernelsmith proposes `{d.op}` again once `{d.file}` changes. "
                   f"The verified winner ({d.geomean:.2f}x geomean) is in the run's artifact.")
            write_summary(summary, f"**kernelsmith**: {msg}")
            return Outcome("declined", msg, d.target, d.op, closed.number, closed.html_url, None, src)
        update = pub.update_branch(d.branch, d.base, d.base_sha, d.file, d.winner_code.encode(),
                                   commit_message(d))
    finally:
        if tmp:
            tmp.cleanup()

    body = with_marker(d.body, marker(d.target, d.op, src, d.base_sha))
    if update.action == "blocked":
        msg = (f"`{d.branch}` has commits by others ({', '.join(c[:8] for c in update.foreign)}); "
               f"kernelsmith does not force-push over them. A newer verified winner "
               f"({d.geomean:.2f}x geomean) is in the run's artifact.")
        if existing is not None:
            existing.create_issue_comment(msg)
        write_summary(summary, f"**kernelsmith**: {msg}")
        return Outcome("blocked", msg, d.target, d.op, existing.number if existing else None,
                       existing.html_url if existing else None, update.sha, src)

    if existing is not None:
        existing.edit(title=d.title, body=body)
        pr, action = existing, ("updated" if update.action != "unchanged" else "unchanged")
    else:
        head = d.branch if d.push_repo == d.repo else f"{d.push_repo.split('/')[0]}:{d.branch}"
        try:
            pr = repo.create_pull(base=d.base, head=head, title=d.title, body=body,
                                  maintainer_can_modify=True)
            action = "opened"
        except GithubException as e:
            # 422: another run opened it between our lookup and now; update that one instead.
            again = _find_pr(repo, d) if e.status == 422 else None
            if again is None:
                raise
            again.edit(title=d.title, body=body)
            pr, action = again, "updated"
    if d.labels:
        pr.add_to_labels(*d.labels)
    _report_check(repo, auth, d, update.sha, pr.html_url)
    msg = f"{action} PR #{pr.number} ({d.geomean:.2f}x geomean): {pr.html_url}"
    write_summary(summary, f"**kernelsmith**: {msg}")
    return Outcome(action, msg, d.target, d.op, pr.number, pr.html_url, update.sha, src)


def winner_diff(auth: GitHubAuth, server_url: str, target, branch: str, file_rel: str,
                base_sha: str | None) -> tuple[str, str]:
    """(unified diff of `file_rel` from the PR's base commit to its branch head, head sha): the
    winner a `/kernelsmith rebase` replays. Read with git from the push repo; nothing is executed."""
    push_repo = target.fork or target.repo
    with tempfile.TemporaryDirectory(prefix="kernelsmith-rebase-") as tmp:
        pub = Publisher(Path(tmp) / "git", server_url, target.repo, push_repo, token_fn=auth.push_token)
        head = pub.fetch_branch(branch)
        if head is None:
            raise PublishError(f"the branch `{branch}` is gone from `{push_repo}`")
        # The bot's commit sits on the run's base (the marker's base_sha); else take the head's parent.
        parent = base_sha if base_sha and pub.has_commit(base_sha) else pub.parent(head)
        old, new = pub.file_at(parent, file_rel), pub.file_at(head, file_rel)
    if old is None or new is None:
        raise PublishError(f"`{file_rel}` is missing on `{branch}` or its base {parent[:12]}")
    diff = unified_diff(old.decode(), new.decode(), file_rel)
    if not diff:
        raise PublishError(f"`{branch}` does not change `{file_rel}`: there is no winner to replay")
    return diff, head


def _report_check(repo, auth: GitHubAuth, d: PullRequestDraft, sha: str, url: str) -> None:
    """A check run with the evidence summary as an App; a commit status with a plain token."""
    summary = f"{d.op}: {d.geomean:.2f}x geomean speedup, upstream tests pass (verify: pass)."
    if auth.is_app:
        repo.create_check_run(name=f"kernelsmith / {d.op}", head_sha=sha, status="completed",
                              conclusion="success", details_url=url,
                              output={"title": f"{d.geomean:.2f}x faster", "summary": summary,
                                      "text": d.body[:60000]})
    else:
        repo.get_commit(sha).create_status(state="success", target_url=url, description=summary[:140],
                                           context=f"kernelsmith/{d.op}")
