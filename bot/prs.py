"""What became of the bot's pull requests: open, merged, or closed without merging ("declined").

A maintainer who closes a bot PR without merging has said no to that change. The state records
the PR as closed together with the operator's source hash it was made at; the bot then proposes
nothing for that operator while its source stays the same, and may again once the source changes.
A merged PR is recorded as merged. GitHub is asked about every PR the state still calls open.
"""

from __future__ import annotations

from kernelsmith.onboard.state import op_key, record_pr

from .prbody import read_marker

OPEN, CLOSED, MERGED = "open", "closed", "merged"


def record(state: dict, target: str, op: str, *, number: int, url: str, pr_state: str = OPEN,
           source_hash: str | None = None, at: str | None = None) -> dict:
    """Record the operator's PR with its state and the source hash its winner was made at."""
    entry = record_pr(state, target, op, number=number, url=url, state_name=pr_state)
    pr = entry["pr"]
    if source_hash:
        pr["source_hash"] = source_hash
    if pr_state in (CLOSED, MERGED):
        pr[f"{pr_state}_at"] = at or pr["updated_at"]
    return entry


def record_outcome(state: dict, target: str, op: str, outcome) -> None:
    """Record a publish Outcome's PR: open, or closed unmerged when publishing was declined."""
    if not outcome.pr_number:
        return
    known = (state.get("operators", {}).get(op_key(target, op)) or {}).get("pr") or {}
    declined_now = outcome.action == "declined"
    if declined_now and known.get("number") == outcome.pr_number and known.get("state") == CLOSED:
        return  # already recorded as closed, with when
    record(state, target, op, number=outcome.pr_number, url=outcome.pr_url,
           pr_state=CLOSED if declined_now else OPEN, source_hash=outcome.source_hash)


def refresh(state: dict, repo, keys: set[str], log=None) -> list[str]:
    """Ask GitHub about each recorded open PR of these state keys; record closed or merged ones.

    Returns one line per change (for the log)."""
    from github import GithubException

    changes = []
    for key in sorted(keys):
        entry = state.get("operators", {}).get(key) or {}
        pr = entry.get("pr") or {}
        if pr.get("state") != OPEN or not pr.get("number"):
            continue
        try:
            gh = repo.get_pull(int(pr["number"]))
        except GithubException as e:  # a deleted PR or a transient error: keep what we know
            if log:
                log(f"cannot read PR #{pr['number']} of {key}: {e.status}")
            continue
        if gh.state == OPEN:
            continue
        merged = gh.merged_at is not None
        src = (read_marker(gh.body) or {}).get("source_hash") or pr.get("source_hash")
        when = (gh.merged_at if merged else gh.closed_at)
        target, op = key.split("/", 1)
        record(state, target, op, number=gh.number, url=gh.html_url, pr_state=MERGED if merged else CLOSED,
               source_hash=src, at=when.isoformat() if when else None)
        changes.append(f"{key}: PR #{gh.number} {'merged' if merged else 'closed without merging'}")
    return changes


def declined(entry: dict, source_hash: str | None) -> dict | None:
    """The PR record when a maintainer closed it unmerged at this same source hash, else None."""
    pr = entry.get("pr") or {}
    if pr.get("state") == CLOSED and source_hash and pr.get("source_hash") == source_hash:
        return pr
    return None
