"""Tables of finished run directories under one folder: `python3 dev/probes/run_table.py DIR`.

Per run: evaluations, evaluations per held GPU-minute, geomean and the referee's phase medians; what
crossed between judge and runner; where the held time went (boot, first candidate verdict, compile
wait, referee), the finalists re-measured or skipped and the builds moved off the window's front;
how deep candidates were timed and when the best full measurement came.
Used by dev/gpu/gpu.d/15-judge-overhead.sh and 45-pipeline.sh on the GPU machine ("-" where a run
written by an older tree lacks a key).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from kernelsmith.search.efficiency import candidate_rows, run_summary


def runs(folder: Path) -> list[Path]:
    """The run directories under `folder`, by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir())


def outcome_table(folder: Path) -> list[str]:
    """Evaluations, rate, geomean and phase medians per run."""
    out = ["| run | evaluations | evals / held GPU-min | geomean | phase medians (s) |",
           "|---|---:|---:|---:|---|"]
    for run in runs(folder):
        if not (run / "result.json").is_file():
            out.append(f"| {run.name} | no result.json | | | |")
            continue
        result = json.loads((run / "result.json").read_text())
        s = run_summary(run)
        phases = "; ".join(f"{group}: " + ", ".join(f"{k} {v}" for k, v in ph.items())
                           for group, ph in (s.get("phase_medians_s") or {}).items())
        g = result.get("geomean_speedup")
        out.append(f"| {run.name} | {s.get('evaluations')} | {s.get('evals_per_held_gpu_minute')} | "
                   f"{'-' if g is None else f'{g:.2f}x'} | {phases} |")
    return out


def _median(values: list) -> object:
    xs = sorted(v or 0 for v in values)
    return xs[len(xs) // 2] if xs else "-"


def channel_table(folder: Path) -> list[str]:
    """What crossed between judge and runner per evaluation (details.channel)."""
    out = ["| run | evaluations with details.channel | median bytes (message files) | median shared_bytes |"
           " median copy_s | shared_on | regions_off |", "|---|---:|---:|---:|---:|---|---|"]
    for run in runs(folder):
        if not (run / "archive.sqlite").is_file():
            continue
        chans = [((c["verdict"] or {}).get("details") or {}).get("channel") for c in candidate_rows(run)]
        chans = [ch for ch in chans if isinstance(ch, dict)]
        on = sorted({str(ch.get("shared_on")) for ch in chans})
        off = sorted({str(ch["regions_off"])[:80] for ch in chans if ch.get("regions_off")})
        medians = [_median([ch.get(k) for ch in chans]) for k in ("bytes", "shared_bytes", "copy_s")]
        out.append(f"| {run.name} | {len(chans)} | " + " | ".join(str(m) for m in medians)
                   + f" | {', '.join(on) or '-'} | {'; '.join(off) or '-'} |")
    return out


def held_time_table(folder: Path) -> list[str]:
    """Where the held time went (GPU 0), the finalists re-measured or skipped, the builds moved."""
    keys = ("boot_s", "first_candidate_s", "compile_wait_s", "referee_s", "span_s", "busy",
            "idle_nothing_queued_s", "idle_builds_only_s")
    out = ["| run | wall s | boot s | first candidate verdict s | compile wait s | referee s | span s | busy "
           "| idle, nothing queued s | idle, only builds queued s | proposing s "
           "| finalists re-measured / skipped | builds moved |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for run in runs(folder):
        if not (run / "result.json").is_file():
            continue
        result = json.loads((run / "result.json").read_text())
        ev = (result.get("evaluator") or [{}])[0]
        finals = result.get("final_measurements") or []
        skipped = sum(1 for f in finals if f.get("skipped"))
        moved = 0
        if (run / "archive.sqlite").is_file():
            with sqlite3.connect(run / "archive.sqlite") as db:
                row = db.execute("SELECT value FROM meta WHERE key='moved'").fetchone()
            moved = len(json.loads(row[0])) if row else 0
        propose = (result.get("loop") or {}).get("propose_s", "-")
        out.append(f"| {run.name} | {result.get('wall_s')} | " + " | ".join(str(ev.get(k, "-")) for k in keys)
                   + f" | {propose} | {len(finals) - skipped} / {skipped} | {moved} |")
    return out


def depth_table(folder: Path) -> list[str]:
    """How deep candidates were timed (timing/staged.py), and when the search's best full measurement came."""
    from kernelsmith.referee.verdict import timing_depth

    depths = ("screen_subset", "screen", "full")
    out = ["| run | stopped at the subset | screened on every shape | fully measured | best full "
           "measurement: candidate, evaluation n, geomean |", "|---|---:|---:|---:|---|"]
    for run in runs(folder):
        if not (run / "archive.sqlite").is_file():
            continue
        rows = candidate_rows(run)
        counts = {d: sum(1 for c in rows if c.verdict and timing_depth(c.verdict_json) == d) for d in depths}
        best = max(((c.trusted_speedup, n, c.id) for n, c in enumerate(rows, 1) if c.trusted_speedup),
                   default=None)
        where = f"#{best[2]}, {best[1]}, {best[0]:.3f}x" if best else "-"
        out.append(f"| {run.name} | " + " | ".join(str(counts[d]) for d in depths) + f" | {where} |")
    return out


def main(folder: str) -> None:
    """Print the four tables."""
    path = Path(folder)
    tables = (outcome_table(path), channel_table(path), held_time_table(path), depth_table(path))
    print("\n\n".join("\n".join(t) for t in tables))


if __name__ == "__main__":
    main(sys.argv[1])
