"""The "kernelsmith dashboard" issue: one per target repo, with the state mirrored in a hidden block.

Each operator's row shows its last run, best speedup, verify status, its PR (open, merged, or
closed unmerged) and whether it is watched, ignored, or declined (a maintainer closed its PR
without merging and the source has not changed since).

Ephemeral runners share the per-operator state (kernelsmith/onboard/state.py) through that block: a run
merges it into the local state file first and writes the merged state back when it ends.
"""

from __future__ import annotations

import json
import re

from kernelsmith.onboard.config import Target
from kernelsmith.onboard.state import entry, normalize_state, op_key

from .prs import declined

TITLE = "kernelsmith dashboard"
LABEL = "kernelsmith"
_BLOCK_RE = re.compile(r"<!-- kernelsmith-state\n(.*?)\n-->", re.S)


def find_dashboard(repo, bot_login: str):
    """The open dashboard issue of a PyGithub repository, or None: an issue (not a PR) with the
    title and label, authored by the bot itself. Anyone can open an issue with that title and label;
    its body must never become the bot's state."""
    for issue in repo.get_issues(state="open", labels=[LABEL], creator=bot_login):
        if issue.pull_request is None and issue.title == TITLE and issue.user.login == bot_login:
            return issue
    return None


def read_block(body: str | None) -> dict | None:
    """The state mirrored in a dashboard body, or None when there is none or it is unreadable."""
    m = _BLOCK_RE.search(body or "")
    if not m:
        return None
    try:
        return normalize_state(json.loads(m.group(1)), "dashboard state block")
    except (ValueError, Exception):  # a hand-edited block must not stop the bot; it is rewritten
        return None


def _block(state: dict) -> str:
    # "--" may not appear inside an HTML comment; \u002d keeps the JSON valid and the comment closed.
    text = json.dumps(state, indent=1, sort_keys=True).replace("--", "-\\u002d")
    return f"<!-- kernelsmith-state\n{text}\n-->"


def repo_keys(targets: list[Target]) -> set[str]:
    """State keys ("<target>/<op>") of these targets' operators."""
    return {op_key(t.name, o.name) for t in targets for o in t.operators}


def merge_into(local: dict, mirrored: dict | None) -> dict:
    """Merge the dashboard's state into the local one: the dashboard is the shared truth, except
    for an entry the local file recorded later (a run whose dashboard update did not happen)."""
    if not mirrored:
        return local
    ops = local.setdefault("operators", {})
    for key, remote in mirrored.get("operators", {}).items():
        mine = ops.get(key)
        if mine and (mine.get("optimized_at") or "") > (remote.get("optimized_at") or ""):
            mine["ignored"] = bool(mine.get("ignored") or remote.get("ignored"))
            continue
        ops[key] = dict(remote)
    return local


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:200] if text not in (None, "") else "—"


def render(repo_name: str, targets: list[Target], state: dict, scans: dict | None = None,
           run_url: str | None = None) -> str:
    """The dashboard body: a table of operators, needs-a-harness marks, and the hidden state block."""
    lines = [f"## kernelsmith dashboard for `{repo_name}`", "",
             "Kept up to date by the bot. Comment `/kernelsmith help` for commands.", "",
             "| target | operator | last run | best speedup | verify | PR | status | last error |",
             "|---|---|---|---:|---|---|---|---|"]
    current = {(name, row.get("name")): row.get("source_hash")
               for name, scan in (scans or {}).items() for row in scan.get("operators", [])}
    for t in targets:
        for o in t.operators:
            e = entry(state, t.name, o.name)
            result = e.get("result") or {}
            speed = result.get("geomean_speedup")
            pr = e.get("pr") or {}
            pr_cell = _pr_cell(pr)
            speed_cell = f"{speed:.2f}x" if speed else "—"
            source = current.get((t.name, o.name)) or e.get("source_hash")
            if e.get("ignored"):
                status = "ignored"
            elif declined(e, source):
                status = "declined: PR closed unmerged; waits for the source to change"
            else:
                status = "watched"
            err = (e.get("last_error") or {}).get("message")
            lines.append(f"| {t.name} | `{o.name}` | {_cell(e.get('optimized_at'))} | "
                         f"{speed_cell} | {_cell(e.get('verify_status'))} | {pr_cell} | "
                         f"{status} | {_cell(err)} |")
    marks = []
    for name, scan in (scans or {}).items():
        for m in scan.get("hotspots", []):
            if not m.get("operator"):  # scan's "needs a harness"
                where = f"`{m.get('file')}` `{m.get('function')}` (line {m.get('line', '?')})"
                marks.append(f"- `{name}`: {where}")
    if marks:
        lines += ["", "### Hotspots that need a harness", "", *marks]
    if run_url:
        lines += ["", f"Last updated by [this workflow run]({run_url})."]
    keys = repo_keys(targets)
    mirrored = {"version": state.get("version", 1),
                "operators": {k: v for k, v in state.get("operators", {}).items() if k in keys}}
    lines += ["", _block(mirrored), ""]
    return "\n".join(lines)


def _pr_cell(pr: dict) -> str:
    """The operator's PR: a link while open, and whether it was merged or closed without merging."""
    if not pr.get("number"):
        return "—"
    link = f"[#{pr['number']}]({pr['url']})" if pr.get("url") else f"#{pr['number']}"
    state = pr.get("state")
    how = {"open": "open", "merged": "merged", "closed": "closed unmerged"}.get(state, state)
    return f"{link} {how}" if how else link


def sync(repo, targets: list[Target], state: dict, scans: dict | None = None, run_url: str | None = None,
         bot_login: str = ""):
    """Create or update the repo's (bot-authored) dashboard issue from the state; returns the issue."""
    body = render(repo.full_name, targets, state, scans, run_url)
    issue = find_dashboard(repo, bot_login)
    if issue is None:
        return repo.create_issue(title=TITLE, body=body, labels=[LABEL])
    if issue.body != body:
        issue.edit(body=body)
    return issue


def record_error(state: dict, target: str, op: str, message: str, when: str) -> None:
    """Remember the last error of an operator (shown on the dashboard)."""
    ops = state.setdefault("operators", {})
    ops.setdefault(op_key(target, op), {})["last_error"] = {"message": message[:500], "at": when}
