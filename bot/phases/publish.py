"""Publish: one verified run → its PR, the state and the reply. The one publish path, used by the
workflow's publish job (`kernelsmith-bot run --stage publish`), by `--stage all` and by
`kernelsmith-bot publish RUN_DIR`. It runs no target or candidate code.

What is published is decided by trusted inputs only: the gate's work item (or the person at the
terminal) for target and operator, the target yaml for repository and file (bot/publish.py); the
run directory is read as evidence only (bot/artifact.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from kernelsmith.onboard.state import entry, op_key, record_run
from kernelsmith.runspec import run_file

from .. import dashboard, prs
from ..actions import write_summary
from ..artifact import Evidence, load_evidence
from ..prbody import fence
from ..pullrequest import Outcome, PublishError, PublishSpec, dry_run, publish_spec
from .replies import reply_for, text

if TYPE_CHECKING:
    from ..context import Context
    from ..work import WorkItem


def publish_run(ctx: Context, spec: PublishSpec, ev: Evidence, source_hash: str | None = None) -> Outcome:
    """Record the run, open or update its PR (in dry-run: write the preview), record the PR.
    PublishError when the run is not publishable; `source_hash` is the gate's scan of the operator."""
    from ..remote import publish_remote

    name, op, run_dir = spec.target.name, spec.op, Path(ev.path)
    # The source hash comes from the gate's scan (or stays as recorded); publishing then records
    # the hash of the base file itself. The run directory's own claims are not used.
    src = source_hash or entry(ctx.state, name, op).get("source_hash") or ""
    record_run(ctx.state, name, op, source_hash=src, result=ev.summary(), run_dir=run_dir,
               verify_status=ev.verify_status)
    if ctx.dry_run:
        outcome = dry_run(spec, run_dir, ctx.env.step_summary)
    else:
        outcome = publish_remote(spec, run_dir, ctx.auth, ctx.env.server_url, summary=ctx.env.step_summary)
    if outcome.source_hash:  # hashed from the base commit itself: the exact source of this run
        ctx.state["operators"][op_key(name, op)]["source_hash"] = outcome.source_hash
    prs.record_outcome(ctx.state, name, op, outcome)
    return outcome


def publish_dir(ctx: Context, spec: PublishSpec, run_dir: Path) -> Outcome:
    """`kernelsmith-bot publish`: one run directory, with the state pulled from and pushed to the
    repo's dashboard (a dry run makes no request at all and saves no state)."""
    ctx.extra_targets.append(spec.target)
    repos = set() if ctx.dry_run else {spec.repo}
    ctx.pull_state(repos)
    outcome = publish_run(ctx, spec, load_evidence(run_dir))
    if repos:
        ctx.push_state(repos)
    return outcome


def publish_all(ctx: Context, items: list[WorkItem]) -> int:
    """The publish job: every item of the gate's work list (run dirs under runs_dir/<target>-<op>)."""
    repos = {i.repo for i in items if i.repo}
    ctx.pull_state(repos)
    failures = sum(not finish(ctx, item, ctx.runs_dir / item.slug) for item in items)
    ctx.push_state(repos)
    return 1 if failures else 0


def finish(ctx: Context, item: WorkItem, run_dir: Path) -> bool:
    """Publish one item's run if verified, record the state, answer; False on failure."""
    reply = reply_for(ctx, item)
    ok, status, details = True, "", ""
    rebase = item.replay is not None
    try:
        if not run_file(run_dir).is_file():  # its content is never read here: the run dir is evidence only
            raise PublishError(f"optimize wrote no run directory for {item.target}/{item.op}; "
                               "see the workflow log")
        # Trusted: the work item (target, op, repo) and the target yaml; the run dir is evidence only.
        spec = publish_spec(item.target, item.op, str(ctx.targets_dir), repo=item.repo)
        ev = load_evidence(run_dir)
        if rebase and not ev.winner:
            # Nothing was searched: the state keeps the last real run of this operator.
            status, details = _replay_lost(ctx, item, ev)
        else:
            outcome = publish_run(ctx, spec, ev, item.source_hash)
            if outcome.action == "declined":
                status = text("declined", message=outcome.message)
            elif rebase:
                status = text("rebased", base=_base_of(ctx, item, ev), remeasured=_remeasured(ev),
                              message=outcome.message)
            else:
                status = text("done", message=outcome.message)
    except PublishError as e:
        status = text("not_updated" if rebase else "not_published", error=e)
    except Exception as e:  # reported on the dashboard and in the reply, never as a traceback there
        ok = False
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        dashboard.record_error(ctx.state, item.target, item.op, message, _now())
        status = text("failed", error=message)
        ctx.log(f"{item.target}/{item.op}: {type(e).__name__}: {message}")
    ctx.log(f"{item.target}/{item.op}: {status}")
    write_summary(ctx.env.step_summary, f"**kernelsmith** `{item.target}/{item.op}`: {status}")
    if reply:
        reply.set(status, details)
    return ok


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _base_of(ctx: Context, item: WorkItem, ev: Evidence) -> str:
    return f"`{ctx.target(item.target).base}` ({(ev.base_sha or 'unknown')[:12]})"


def _remeasured(ev: Evidence) -> str:
    g = ev.geomean
    return text("remeasured", geomean=g) if g is not None else text("remeasured_untimed")


def _replay_lost(ctx: Context, item: WorkItem, ev: Evidence) -> tuple[str, str]:
    """The reply when a rebase found no winner: no longer applies, rejected, or no longer faster."""
    where = _base_of(ctx, item, ev)
    again = text("again", op=item.op)
    rep = ev.replay
    if not ev.finished or rep is None:
        return text("replay_unfinished", base=where, again=again), ""
    # The error text comes from the run directory: shown only inside a code block.
    details = text("details", fenced=fence(rep["error"])) if rep.get("error") else ""
    if not rep.get("applied"):
        return text("replay_does_not_apply", base=where, again=again), details
    if not rep.get("accepted"):
        return text("replay_rejected", base=where, reason=rep.get("reason"), again=again), details
    return text("replay_not_faster", base=where, again=again), details
