"""Gate: the Actions event → the work list. A comment's author's permission is asked first,
before anything is written; a user without write permission gets no reaction and no reply; only a
permitted user's command is answered (comment.py).
In the workflow this is the gate job, which holds a token that can comment but not push."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..actions import write_output, write_summary
from ..commands import read_command
from ..work import WorkItem, to_json
from . import comment, schedule
from .replies import Reply, text

if TYPE_CHECKING:
    from ..actions import ActionsEnv
    from ..context import Context

ALLOWED_ROLES = {"write", "maintain", "admin"}


def read_event(env: ActionsEnv) -> dict:
    """The event payload at GITHUB_EVENT_PATH ({} when there is none)."""
    if not env.event_path or not Path(env.event_path).is_file():
        return {}
    return json.loads(Path(env.event_path).read_text())


def work_items(ctx: Context) -> list[WorkItem]:
    """The work list for this event (help, ignore and refusals are answered here and queue nothing)."""
    name, payload = ctx.env.event_name, read_event(ctx.env)
    if name in ("schedule", "workflow_dispatch"):
        return schedule.plan(ctx, payload.get("inputs") or {})
    if name == "issue_comment":
        return from_comment(ctx, payload)
    ctx.log(f"kernelsmith-bot: nothing to do for event {name!r}")
    return []


def from_comment(ctx: Context, payload: dict) -> list[WorkItem]:
    """A `/kernelsmith` comment: permission (nothing at all for a user without it), then a reaction
    and the reply, then the command."""
    posted = payload.get("comment") or {}
    user = (posted.get("user") or {})
    if payload.get("action") != "created" or user.get("type") == "Bot":
        return []
    asked = read_command(posted.get("body"))
    if asked is None:
        return []
    repo_name = (payload.get("repository") or {}).get("full_name") or ctx.env.repository
    repo = ctx.auth.repo(repo_name)
    login = user.get("login", "")
    # The permission is asked first, and a user without it gets nothing written at all: no
    # reaction, no reply (a reply would @-mention them, and anyone could make the bot post).
    role = permission(repo, login)
    if role not in ALLOWED_ROLES:
        ctx.log(f"kernelsmith-bot: ignored a command by a user with {role!r} permission "
                f"(needs write, maintain or admin)")
        return []
    issue = repo.get_issue((payload.get("issue") or {}).get("number"))
    issue.get_comment(posted["id"]).create_reaction("eyes")
    reply = Reply(issue, text("header", command=_quote_cmd(posted.get("body")), login=login))
    return comment.answer(ctx, asked, repo, repo_name, issue, reply)


def permission(repo, login: str) -> str:
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


def write_work_list(env: ActionsEnv, items: list[WorkItem]) -> None:
    """The gate job's outputs (`work`, `count`) and its step summary."""
    write_output(env.output, "work", to_json(items))
    write_output(env.output, "count", str(len(items)))
    lines = [f"- `{i.target}/{i.op}` ({', '.join(i.notes) or 'on request'})" for i in items]
    write_summary(env.step_summary, "**kernelsmith** work list:\n" + ("\n".join(lines) or "nothing to do"))


def _quote_cmd(body: str | None) -> str:
    """The first line of the command, shortened and stripped of backticks, for the reply header."""
    first = next((line.strip() for line in (body or "").splitlines() if line.strip()), "")
    return first.replace("`", "'")[:120]
