"""Stage 3 of `kernelsmith-bot run`: publish each verified run of the work list, record the state,
answer the reply comment. A mixin of bot.app.Bot (it uses its auth, env, state and replies).

What is published is decided by the gate's work item (target, op, repo) and the target yaml
(bot/publish.py); the run directory is read as evidence only (bot/artifact.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from kernelsmith.target.state import entry, op_key, record_run

from . import dashboard, prs
from .publish import PublishError, write_summary

if TYPE_CHECKING:
    from .work import WorkItem


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class PublishStage:
    """Bot's publish stage (see the module doc)."""

    def finish(self, item: WorkItem, run_dir: Path) -> bool:
        """Stage 3 for one item: publish if verified, record state, answer; False on failure."""
        from .artifact import load_evidence
        from .publish import publish_spec

        reply = self._reply_for(item)
        ok, status, text = True, "", ""
        rebase = item.replay is not None
        try:
            if not (run_dir / "run.json").is_file():
                raise PublishError(f"optimize wrote no run directory for {item.target}/{item.op}; "
                                   "see the workflow log")
            # Trusted: the work item (target, op, repo) and the target yaml; the run dir is evidence only.
            spec = publish_spec(item.target, item.op, str(self.targets_dir), repo=item.repo)
            ev = load_evidence(run_dir)
            if rebase and not ev.winner:
                # Nothing was searched: the state keeps the last real run of this operator.
                status, text = self._replay_lost(item, ev)
            else:
                self._record_run(item, ev, run_dir)
                outcome = self._publish(spec, run_dir)
                self._record_outcome(item, outcome)
                if outcome.action == "declined":
                    status = f"⚪ **no PR**: {outcome.message}"
                elif rebase:
                    status = f"✅ **rebased** onto {self._base_of(item, ev)}: {self._remeasured(ev)}; " \
                             f"{outcome.message}"
                else:
                    status = f"✅ **done**: {outcome.message}"
        except PublishError as e:
            status = f"⚪ **{'PR not updated' if rebase else 'no PR'}**: {e}"
        except Exception as e:  # reported on the dashboard and in the reply, never as a traceback there
            ok = False
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            dashboard.record_error(self.state, item.target, item.op, message, _now())
            status = f"❌ **failed**: {message}"
            self.log(f"{item.target}/{item.op}: {type(e).__name__}: {message}")
        self.log(f"{item.target}/{item.op}: {status}")
        write_summary(self.env.step_summary, f"**kernelsmith** `{item.target}/{item.op}`: {status}")
        if reply:
            reply.set(status, text)
        return ok

    def _record_run(self, item: WorkItem, ev, run_dir: Path) -> None:
        # The source hash comes from the gate's scan (or stays as recorded); publishing then records
        # the hash of the base file itself. The run directory's own claims are not used.
        src = item.source_hash or entry(self.state, item.target, item.op).get("source_hash") or ""
        record_run(self.state, item.target, item.op, source_hash=src, result=ev.summary(),
                   run_dir=run_dir, verify_status=ev.verify_status)

    def _record_outcome(self, item: WorkItem, outcome) -> None:
        """The PR (open, or closed unmerged when publishing was declined) and the source it was made at."""
        if outcome.source_hash:  # hashed from the base commit itself: the exact source of this run
            self.state["operators"][op_key(item.target, item.op)]["source_hash"] = outcome.source_hash
        prs.record_outcome(self.state, item.target, item.op, outcome)

    def _base_of(self, item: WorkItem, ev) -> str:
        return f"`{self.target(item.target).base}` ({(ev.base_sha or 'unknown')[:12]})"

    @staticmethod
    def _remeasured(ev) -> str:
        g = ev.geomean
        return (f"the winner re-applied, re-measured at {g:.2f}x geomean and verified" if g is not None
                else "the winner re-applied and verified (not timed: no GPU)")

    def _replay_lost(self, item: WorkItem, ev) -> tuple[str, str]:
        """The reply when a rebase found no winner: no longer applies, rejected, or no longer faster."""
        from .prbody import fence

        where = self._base_of(item, ev)
        again = f"run `/kernelsmith optimize {item.op}` for a new search on it."
        rep = ev.replay
        if not ev.finished or rep is None:
            return (f"❌ **rebase failed**: the replay on {where} did not finish; see the workflow log. "
                    f"Or {again}", "")
        # The error text comes from the run directory: shown only inside a code block.
        detail = f"Details:\n\n{fence(rep['error'])}" if rep.get("error") else ""
        if not rep.get("applied"):
            return f"⚠️ **the winner no longer applies to {where}**: {again}", detail
        if not rep.get("accepted"):
            return (f"⚠️ **the winner fails on {where}**: the referee rejects it "
                    f"(`{rep.get('reason')}`); {again}", detail)
        return f"⚠️ **the winner is no longer faster on {where}**: {again}", detail

    def _publish(self, spec, run_dir: Path):
        from .publish import dry_run
        from .remote import publish_remote

        if self.dry_run:
            return dry_run(spec, run_dir, self.env.step_summary)
        return publish_remote(spec, run_dir, self.auth, self.env.server_url, summary=self.env.step_summary)

    def publish_stage(self, items: list[WorkItem]) -> int:
        """Stage 3 for the work list of the gate job (run dirs under runs_dir/<target>-<op>)."""
        self.pull_state({i.repo for i in items if i.repo})
        failures = sum(not self.finish(item, self.runs_dir / item.slug) for item in items)
        self.push_state({i.repo for i in items if i.repo})
        return 1 if failures else 0
