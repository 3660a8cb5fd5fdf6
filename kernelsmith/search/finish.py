"""The end of a search: re-measure the best candidates with new seeds, pick the winner, and write
winner/ and result.json (the caller renders report.md, speedup.png and benchmark.json from them:
report.py's write_reports).

With timing, the winner is, among the re-measured candidates whose re-measurement is a measured
win (evidence.py: the geomean's 95% CI above 1.0, no shape slower than 0.98x beyond its CI, not
noisy), the smallest change (fewest changed lines against the base) within 1% of the fastest: a
reviewer should not get a size table for a difference the measurement cannot tell apart. When no
finalist is a measured win the run ends without a winner and result.json's `no_winner_reason`
says why. Without timing (interpreter), it is the latest accepted candidate that differs from the
base and passes again on new inputs; its geomean is null.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.referee.verdict import is_noisy
from kernelsmith.rundir import write_json, write_text
from kernelsmith.runspec import Replay
from kernelsmith.search.archive import now_iso, rejected_counts
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.edits import unified_diff
from kernelsmith.search.evidence import SIMPLER_WITHIN, ci_seed, judge
from kernelsmith.search.mutators.rewrite import rewrite_lineage
from kernelsmith.search.result import SearchResult
from kernelsmith.search.seeds import FINAL_SEED_OFFSET

# A finalist whose search geomean is below this fraction of a re-measured win is not re-measured:
# re-measurements move a geomean by a percent or two (H200 runs), not the four it would need.
FINAL_SKIP_BELOW = 0.95


def changed_lines(base_code: str, code: str) -> int:
    """Lines added or removed against the base (the size of the change a reviewer reads)."""
    diff = unified_diff(base_code, code, "f")
    return sum(1 for line in diff.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def _finalists(search, rows: list[Candidate]) -> list[Candidate]:
    base_hash = search.archive.base()["code_hash"]
    accepted = [c for c in rows if c.accepted and not c.is_base and c["code_hash"] != base_hash]
    if not search.timed:
        return list(reversed(accepted))[: search.hooks.final_k]
    full = [c for c in accepted if (c.trusted_speedup or 0) > 1.0]
    # Candidates whose search measurement already is a measured win go first: a faster one that
    # loses a shape would fail the same rule again on re-measurement and crowd out one that passes.
    # Judged fastest first, only until enough pass (a bootstrap costs a fraction of a second).
    k = search.hooks.final_k
    passed, failed = [], []
    for c in sorted(full, key=lambda c: (-c.speedup, c.id)):
        if len(passed) == k:
            break
        (passed if judge(c.verdict_json, ci_seed(search.seed, c.id))["win"] else failed).append(c)
    return (passed + failed)[:k]


NOISY_RETAKES = 2  # a final measurement whose A/A control strayed is taken again, on new inputs


def _remeasure(search, evaluator, row: Candidate, seed: int) -> dict:
    """The final verdict of one finalist; a noisy one (the A/A control past ±1%: the machine, not
    the candidate) is taken again on new inputs, up to NOISY_RETAKES times, and the last one kept."""
    verdict = evaluator.remeasure(row, seed)
    for attempt in range(1, NOISY_RETAKES + 1):
        if not (search.timed and verdict.get("accepted") and is_noisy(verdict)):
            break
        search.progress.note(f"re-measuring candidate #{row.id} again: its A/A control strayed past ±1%")
        verdict = evaluator.remeasure(row, seed + attempt)
    return verdict


def pick_winner(search, evaluator) -> tuple[Candidate | None, dict | None, list[dict]]:
    """(winner, its final verdict, the final measurements) after re-measuring the finalists."""
    archive = search.archive
    finalists = _finalists(search, archive.all())
    final: dict[str, dict] = archive.get_meta("final", {}) or {}
    seed = search.seed + FINAL_SEED_OFFSET
    measured, good = [], []
    for row in finalists:
        key = str(row.id)
        top = max((g for g, _ in good), default=None)
        if top is not None and key not in final and (row.speedup or 0.0) < top * FINAL_SKIP_BELOW:
            # It would have to gain more on new inputs than re-measurements move to come within
            # SIMPLER_WITHIN of a measured win: on a heavy harness a re-measurement costs seconds.
            measured.append({"id": row.id, "accepted": None, "reason": None, "search_speedup": row.speedup,
                             "final_speedup": None, "noisy": False,
                             "skipped": f"search geomean below {FINAL_SKIP_BELOW:.0%} of a re-measured win "
                                        f"({top:.3f}x): it cannot be the winner"})
            continue
        if key not in final:
            search.progress.note(f"re-measuring candidate #{row.id} with new input seeds")
            # Stored as it finishes: a kill here repeats at most one re-measurement.
            final[key] = _remeasure(search, evaluator, row, seed)
            archive.set_meta("final", final)
        v = final[key]
        m = {
            "id": row.id,
            "accepted": bool(v.get("accepted")),
            "reason": v.get("reason"),
            "search_speedup": row.speedup,
            "final_speedup": v.get("geomean_speedup"),
            "noisy": is_noisy(v),
        }
        measured.append(m)
        if not search.timed:
            if v.get("accepted"):
                return row, v, measured  # latest first: the first that passes again wins
            continue
        evidence = judge(v, ci_seed(search.seed + FINAL_SEED_OFFSET, row.id))
        m["final_ci95"], m["measured_win"], m["not_a_win"] = (
            evidence["geomean_ci95"], evidence["win"], evidence["reason"])
        if evidence["win"]:
            good.append((v["geomean_speedup"], row))
    if not good:
        return None, None, measured
    remeasured = {m["id"] for m in measured if "skipped" not in m}
    size = {r.id: changed_lines(search.task.base_code, r.code) for r in finalists if r.id in remeasured}
    fastest = max(g for g, _ in good)
    close = [(g, r) for g, r in good if g >= fastest * (1 - SIMPLER_WITHIN)]
    _, row = min(close, key=lambda x: (size[x[1].id], -x[0], x[1].id))
    for m in measured:
        if m["id"] in size:
            m["changed_lines"] = size[m["id"]]
        m["chosen"] = m["id"] == row.id
    return row, final[str(row.id)], measured


def no_winner_reason(search, measured: list[dict]) -> str:
    """Why the run ends without a winner, in one sentence for result.json, report.md and the console."""
    if not measured:
        if search.timed:
            return ("no accepted candidate was measured faster than the base (geomean > 1.0 on a full, "
                    "non-noisy measurement), so none was re-measured")
        return "no accepted candidate differs from the base"
    if not search.timed:
        return "no accepted candidate passed again on new inputs: " + "; ".join(
            f"#{m['id']}: {m.get('reason')}" for m in measured)
    return f"none of the {len(measured)} re-measured finalist(s) is a measured win: " + "; ".join(
        f"#{m['id']}: {m.get('not_a_win')}" for m in measured)


def _shapes(verdict: dict | None) -> list[dict]:
    out = []
    for s in (verdict or {}).get("shapes") or []:
        out.append(
            {
                "shape": s.get("shape"),
                "baseline_ms": s.get("baseline_ms"),
                "winner_ms": s.get("candidate_ms"),
                "speedup": s.get("speedup"),
                "ci95": s.get("ci95"),
                "pct_roofline": s.get("pct_roofline"),
                "max_abs_err": s.get("max_abs_err"),
                "aa_bias": s.get("aa_bias"),  # a strayed A/A control inside the CI (referee timing/ab.py)
            }
        )
    return out


def _replay_summary(replay: Replay, rows: list[Candidate]) -> dict:
    """What became of a replayed winner: applied or not, and the referee's reason when rejected."""
    row = next((c for c in rows if c.mutator == "replay"), None)
    v = row.verdict_json if row is not None else {}
    return {
        "source": replay.source,
        "candidate": row.id if row else None,
        "applied": bool(row and row.code is not None),
        "accepted": bool(row and row.accepted),
        "reason": v.get("reason"),
        "error": v.get("error"),
    }


def finish(search, evaluator, started: float) -> SearchResult:
    """Pick the winner and write winner/ and result.json; returns the run directory and that data."""
    from kernelsmith.sandbox import summary as sandbox_summary

    task, archive, path = search.task, search.archive, Path(search.path)
    final_start = time.time()
    winner, verdict, measured = pick_winner(search, evaluator)
    final_s = time.time() - final_start
    rows = archive.all()
    base = archive.base()
    proposals = [c for c in rows if not c.is_base]
    device = evaluator.device_info or base.verdict_json.get("device") or {}
    winner_dir = path / "winner"
    name = Path(task.operator.file).name
    winner_json = None
    if winner is not None:
        diff = unified_diff(task.base_code, winner.code, task.operator.file)
        write_text(winner_dir / name, winner.code)
        write_text(winner_dir / "winner.diff", diff)
        winner_json = {
            "id": winner.id,
            "parent": winner.parent_id,
            "file": task.operator.file,
            "diff": diff,
            # Structured, so publishing can render the sentence itself (bot/prbody.py) without text.
            "rewrites": rewrite_lineage(rows, winner.id, winner.code),
        }
    else:
        for stale in (winner_dir / name, winner_dir / "winner.diff"):
            stale.unlink(missing_ok=True)
    reason = None if winner is not None else no_winner_reason(search, measured)
    win_ci = next((m.get("final_ci95") for m in measured if winner and m["id"] == winner.id), None)
    if reason is not None:
        search.progress.note(f"no winner: {reason}")
    elif search.timed:
        ci = f" (95% CI {win_ci[0]:.3f}-{win_ci[1]:.3f})" if win_ci else ""
        search.progress.note(f"winner: #{winner['id']}, geomean {verdict['geomean_speedup']:.3f}x{ci}")
    wall = search.prior_wall + time.time() - started  # every invocation of this run, resumes included
    archive.set_meta("wall_s", wall)
    result = {
        "target": str(task.target.path),
        "op": task.operator.name,
        "repo": task.target.repo,
        "base_sha": task.base_sha,
        "base_release": getattr(task, "base_release", None),
        "device": {k: device.get(k) for k in ("name", "driver", "torch", "triton")},
        "proposals": len(proposals),
        "evaluations": archive.evaluations(),
        "accepted": sum(1 for c in proposals if c.accepted),
        "rejected": rejected_counts(rows),
        "wall_s": round(wall, 1),
        "winner": winner_json,
        "shapes": _shapes(verdict) if winner is not None else [],
        "geomean_speedup": verdict.get("geomean_speedup") if winner is not None and search.timed else None,
        "geomean_ci95": win_ci,
        "no_winner_reason": reason,
        "timed": search.timed,
        "run_id": path.name,
        "seed": search.seed,
        "mutator": search.run.mutator,
        "source_sha256": hashlib.sha256(task.base_code.encode()).hexdigest(),
        "stop_reason": search.stop_reason,
        # The launch space (rules.py): its distinct launches, how many were judged, whether all were.
        "space": search.space_summary(),
        "final_measurements": measured,
        "precompile": dict(evaluator.precompiler.stats) if evaluator.precompiler is not None else None,
        "evaluator": evaluator.summary() if hasattr(evaluator, "summary") else None,
        # The loop's own time proposing (Optuna, twins, selection): the GPUs idle on it when the
        # window runs dry.
        "loop": {"propose_s": round(search.propose_s, 2), "pipeline": search.pipeline},
        # This invocation: setting up before wall_s's clock starts (task, harness facts, archive,
        # compile processes), the search, the finalists' re-measurement.
        "timeline": {**search.timeline, "final_s": round(final_s, 2)},
        "llm": next((dict(m.stats) for m in search.mutators if m.name == "llm"), None),
        "sandbox": sandbox_summary(),
    }
    # Every invocation's own statistics (a resume's come after the run's first), kept in the archive
    # so a resume appends to them rather than replacing them.
    invocation = {k: result[k] for k in ("evaluator", "precompile", "loop", "timeline", "llm")}
    invocation["finished_at"] = now_iso()
    invocations = (archive.get_meta("invocations", []) or []) + [invocation]
    archive.set_meta("invocations", invocations)
    result["invocations"] = invocations
    if search.run.replay is not None:
        result["replay"] = _replay_summary(search.run.replay, rows)
    if search.run.command == "sweep":
        from kernelsmith.search.sweep import summary

        result["command"] = "sweep"
        result["sweep"] = summary(search, rows)
    write_json(path / "result.json", result)
    return SearchResult(run_dir=path, data=result)


def record_state(run_dir: Path, progress) -> None:
    """Mark the operator optimized at this source hash, so scheduled runs skip it until it changes."""
    from kernelsmith.onboard.state import record_run_dir

    try:
        record_run_dir(run_dir)
    except (KernelsmithError, OSError) as e:  # the run itself is complete and stays valid
        progress.note(f"warning: could not record the run in the state file: {e}")
