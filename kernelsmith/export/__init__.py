"""`kernelsmith export`: training data (SFT chat samples, RL prompts) from evolution archives."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.export.dedup import DEFAULT_SIMILARITY, NearDuplicates
from kernelsmith.export.records import rl_record, sft_record
from kernelsmith.export.steps import DEFAULT_MIN_GAIN, best_per_trajectory, select_steps
from kernelsmith.runspec import RunSpec, run_file
from kernelsmith.sandbox import summary as sandbox_summary

FORMATS = ("sft", "rl")
FASTER_RULE = (
    "a later step is kept only when parent and child were both timed (not noisy) and child "
    "speedup / parent speedup >= min_gain; runs without timing (interpreter) have no speedups, so "
    "no later step is 'faster' and only their accepted first steps (base -> first correct "
    "rewrite) are kept"
)


def read_run(run_dir: str | Path) -> tuple[RunSpec, list[dict]]:
    """(run.json, archive rows) of a run directory; ConfigError naming what is missing."""
    from kernelsmith.search.archive import Archive

    path = Path(run_dir).resolve()
    db = path / "archive.sqlite"
    if not run_file(path).is_file():
        raise ConfigError(path, "not a run directory (no run.json)", "RUN_DIR")
    if not db.is_file():
        raise ConfigError(path, "no archive.sqlite in this run directory", "RUN_DIR")
    run = RunSpec.load(path)
    with Archive(db, read_only=True) as archive:
        rows = archive.all()
    return run, rows


def task_for_run(run: RunSpec, run_dir: Path, rows: list[dict]):
    """The run's Task (for prompts), with the base code as the archive recorded it."""
    from kernelsmith.onboard.config import load_target
    from kernelsmith.onboard.task import make_task

    target_path = Path(run.target)
    if not target_path.is_file():
        raise ConfigError(run_file(run_dir), f"target yaml {target_path} no longer exists", "target")
    if not Path(run.checkout).is_dir():
        raise ConfigError(run_file(run_dir), f"checkout {run.checkout} no longer exists", "checkout")
    # The prompts show the harness's shapes and reference: its facts, from a sandboxed child.
    task = make_task(load_target(target_path), run.op, Path(run.checkout), run.base_sha, harness="facts")
    base = next((r for r in rows if r.get("mutator") == "base" and r.get("code")), None)
    if base is not None:
        task.base_code = base["code"]
    return task


def export_runs(run_dirs: list[str | Path], fmt: str, out: str | Path, *, min_gain: float = DEFAULT_MIN_GAIN,
                similarity: float = DEFAULT_SIMILARITY, rl_top: int = 1) -> dict:
    """Write the records of `run_dirs` to `out` (JSON lines) and `out`.summary.json; return the summary."""
    if fmt not in FORMATS:
        raise ConfigError("--format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if not run_dirs:
        raise ConfigError("RUN_DIR", "give at least one run directory")
    out = Path(out)
    dedup = NearDuplicates(similarity)
    records: list[dict] = []
    sources: list[dict] = []
    dropped: dict[str, int] = {}
    counts = {"candidates": 0, "kept_steps": 0, "first": 0, "improve": 0}
    for run_dir in run_dirs:
        run_dir = Path(run_dir).resolve()
        run, rows = read_run(run_dir)
        steps, why = select_steps(rows, min_gain)
        for k, v in why.items():
            dropped[k] = dropped.get(k, 0) + v
        if fmt == "rl":
            best = best_per_trajectory(rows, steps, rl_top)
            if len(steps) > len(best):
                extra = len(steps) - len(best)
                dropped["not_best_in_trajectory"] = dropped.get("not_best_in_trajectory", 0) + extra
            steps = best
        source = {"run": str(run_dir), "target": run.target, "op": run.op, "repo": run.repo,
                  "base_sha": run.base_sha, "mutator": run.mutator, "device": run.device}
        task = task_for_run(run, run_dir, rows) if steps else None
        run_records = []
        # Best gain first, so of near-duplicates the better step is the one kept.
        for step in sorted(steps, key=lambda s: (s.gain is None, -(s.gain or 0.0), s.child["id"])):
            record = (sft_record if fmt == "sft" else rl_record)(task, step, source)
            answer = (record["messages"][-1] if fmt == "sft" else record["reference_answer"])["content"]
            dup = dedup.seen(step.parent["code"], step.child["code"], answer)
            if dup:
                dropped[dup] = dropped.get(dup, 0) + 1
                continue
            run_records.append(record)
            counts[step.kind] += 1
        kept_here = len(run_records)
        records.extend(sorted(run_records, key=lambda r: r["meta"]["child_id"]))
        counts["candidates"] += sum(1 for r in rows if r.get("mutator") != "base")
        sources.append({**source, "candidates": sum(1 for r in rows if r.get("mutator") != "base"),
                        "records": kept_here})
    counts["kept_steps"] = len(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=False) + "\n")
    summary = {
        "format": fmt, "output": str(out), "records": len(records), "counts": counts,
        "dropped": dict(sorted(dropped.items())), "gains": _gain_stats(records),
        "rules": {"min_gain": min_gain, "similarity": similarity, "faster": FASTER_RULE,
                  **({"rl_top_per_trajectory": rl_top} if fmt == "rl" else {})},
        "sources": sources,
        # Each run's harness ran in a sandboxed child (its facts: shapes, reference source), or not.
        "sandbox": sandbox_summary(),
    }
    summary_path = out.with_name(out.name + ".summary.json")
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _gain_stats(records: list[dict]) -> dict:
    gains = [r["meta"]["gain"] for r in records if r["meta"]["gain"] is not None]
    improve = [r["meta"]["gain"] for r in records if r["meta"]["kind"] == "improve"]
    if not gains:
        return {"timed_records": 0, "note": "no timed step (interpreter runs): gains unknown"}
    return {
        "timed_records": len(gains),
        "mean": statistics.fmean(gains), "median": statistics.median(gains),
        "geomean": statistics.geometric_mean(gains), "max": max(gains), "min": min(gains),
        "improve_steps_geomean": statistics.geometric_mean(improve) if improve else None,
    }


def format_summary(summary: dict) -> str:
    """The summary as a few lines of text for the terminal."""
    c = summary["counts"]
    lines = [
        f"{summary['records']} {summary['format']} records -> {summary['output']}",
        f"  from {len(summary['sources'])} run(s), {c['candidates']} candidates: "
        f"{c['first']} first steps, {c['improve']} improving steps",
    ]
    if summary["dropped"]:
        lines.append("  dropped: " + ", ".join(f"{k} {v}" for k, v in summary["dropped"].items()))
    g = summary["gains"]
    if g.get("timed_records"):
        lines.append(f"  gain over parent: geomean {g['geomean']:.3f}x, median {g['median']:.3f}x, "
                     f"max {g['max']:.3f}x ({g['timed_records']} timed records)")
    else:
        lines.append("  gains: unknown (no timed step: interpreter runs keep only first correct steps)")
    for s in summary["sources"]:
        lines.append(f"  {s['op']} ({s['mutator']}, {s['device']}): {s['records']} of {s['candidates']} "
                     f"candidates  {s['run']}")
    lines.append(f"  summary: {summary['output']}.summary.json")
    if (summary.get("sandbox") or {}).get("enabled") is False:
        lines.append(f"  warning: {summary['sandbox'].get('note')}")
    return "\n".join(lines)
