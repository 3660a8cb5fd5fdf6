"""Search efficiency from run directories: best speedup against GPU time, evaluations per GPU-minute,
and the params-vs-grid comparison (`python -m kernelsmith.search.efficiency RUN_DIR... --compare A B`).

GPU time is the referee's time per candidate (`eval_s`: correctness, integrity, compilation and
timing, screen and full together), summed in evaluation order; "held" GPU time is the run's wall
time times its GPUs; "best" counts only accepted, full,
non-noisy measurements, as the search itself does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelsmith.runspec import RunSpec
from kernelsmith.search.archive import Archive
from kernelsmith.search.candidate import Candidate

# "Reached 95% of the sweep": a search's best holds this share of the sweep's gain over the base.
SWEEP_SHARE = 0.95


def gain_target(reference: float, fraction: float) -> float:
    """The geomean that holds `fraction` of the reference's gain over the base (1.0)."""
    return 1.0 + fraction * (reference - 1.0) if reference > 1.0 else fraction * reference


def candidate_rows(run_dir: Path) -> list[Candidate]:
    """The run's evaluated candidates (the base left out), in evaluation order."""
    with Archive(Path(run_dir) / "archive.sqlite", read_only=True) as a:
        rows = [c for c in a.all() if not c.is_base and c.evaluated]
    return sorted(rows, key=lambda c: c["evaluated_at"] or "")


def curve(rows: list[Candidate]) -> list[tuple[float, float]]:
    """[(cumulative GPU seconds, best geomean so far)] after each of `candidate_rows`."""
    out, t, best = [], 0.0, 1.0
    for c in rows:
        if not c["eval_s"]:
            continue
        t += c["eval_s"]
        best = max(best, c.trusted_speedup or 0.0)
        out.append((t, best))
    return out


def best_at(points: list[tuple[float, float]], seconds: float) -> float:
    """The best geomean reached within `seconds` of GPU time."""
    return max([b for t, b in points if t <= seconds] + [1.0])


def time_to(points: list[tuple[float, float]], target: float) -> float | None:
    """GPU seconds until the best reached `target` (None: never)."""
    return next((t for t, b in points if b >= target), None)


def phase_medians(rows: list[Candidate]) -> dict[str, dict[str, float]]:
    """Median seconds per referee phase (load, correctness, ..., screen/full timing) of
    `candidate_rows`, grouped by timing depth: screened on representative shapes only
    ("screen_subset"), screened on every shape, or also fully measured."""
    import statistics

    groups: dict[str, dict[str, list[float]]] = {}
    for c in rows:
        phases = (c.verdict.details or {}).get("phase_s") if c.verdict else None
        if not phases:
            continue
        # "screen_subset" rows (referee/staging.py) are their own group: they skipped most timing.
        subset = c.depth and c.verdict.depth == "screen_subset"
        g = groups.setdefault("screen_subset" if subset else (c.depth or "none"), {})
        for k, v in phases.items():
            g.setdefault(k, []).append(v)
    return {t: {k: round(statistics.median(v), 4) for k, v in g.items()} for t, g in groups.items()}


def run_summary(run_dir: Path) -> dict:
    """One run: geomean, % roofline of the winner, evaluations per GPU-minute and per wall minute."""
    result = json.loads((Path(run_dir) / "result.json").read_text())
    n_gpus = len(RunSpec.load(run_dir).gpus)
    rows = candidate_rows(run_dir)
    pts = curve(rows)
    gpu_s = pts[-1][0] if pts else 0.0
    roofs = [s["pct_roofline"] for s in result.get("shapes") or [] if s.get("pct_roofline") is not None]
    return {
        "run": str(run_dir),
        "op": result["op"],
        "mutator": result.get("mutator"),
        "geomean_speedup": result.get("geomean_speedup"),
        "proposals": result["proposals"],
        "evaluations": result["evaluations"],
        "gpu_minutes": round(gpu_s / 60, 3),
        "evals_per_gpu_minute": round(result["evaluations"] / (gpu_s / 60), 1) if gpu_s else None,
        "evals_per_wall_minute": round(result["evaluations"] / (result["wall_s"] / 60), 1)
        if result.get("wall_s")
        else None,
        # Held GPU time: every GPU of the run for the whole wall time, cold starts, waits and the
        # final re-measurement included (the stricter count).
        "gpus": n_gpus,
        "evals_per_held_gpu_minute": round(result["evaluations"] / (n_gpus * result["wall_s"] / 60), 1)
        if result.get("wall_s")
        else None,
        # The same with this invocation's setup counted too (timeline.setup_s: task, harness facts,
        # compile processes and the fork servers' imports happen there).
        "evals_per_held_gpu_minute_with_setup": _with_setup(result, n_gpus),
        "winner_pct_roofline": {"min": min(roofs), "max": max(roofs)} if roofs else None,
        "precompile": result.get("precompile"),
        "phase_medians_s": phase_medians(rows),
        "evaluator": result.get("evaluator"),
        "timeline": result.get("timeline"),  # setup before wall_s, search, re-measurement (None: older runs)
    }


def _with_setup(result: dict, n_gpus: int) -> float | None:
    """Evaluations per GPU-minute over (setup + wall time) x GPUs; None without a timeline."""
    setup = (result.get("timeline") or {}).get("setup_s")
    if setup is None or not result.get("wall_s"):
        return None
    return round(result["evaluations"] / (n_gpus * (result["wall_s"] + setup) / 60), 1)


def compare(a: Path, b: Path) -> dict:
    """Search `a` against search `b` (e.g. params against a grid sweep) at equal GPU time."""
    pa, pb = curve(candidate_rows(a)), curve(candidate_rows(b))
    horizon = min(pa[-1][0] if pa else 0.0, pb[-1][0] if pb else 0.0)
    best_a, best_b = (pa[-1][1] if pa else 1.0), (pb[-1][1] if pb else 1.0)
    target = gain_target(max(best_a, best_b), SWEEP_SHARE)
    ta, tb = time_to(pa, target), time_to(pb, target)
    return {
        "a": str(a),
        "b": str(b),
        "equal_gpu_seconds": round(horizon, 2),
        "best_a_at_equal_time": round(best_at(pa, horizon), 4),
        "best_b_at_equal_time": round(best_at(pb, horizon), 4),
        "best_a": round(best_a, 4),
        "best_b": round(best_b, 4),
        "target": round(target, 4),  # SWEEP_SHARE of the better run's gain
        "gpu_seconds_to_target_a": round(ta, 2) if ta is not None else None,
        "gpu_seconds_to_target_b": round(tb, 2) if tb is not None else None,
        "speedup_gain_per_gpu_minute_a": round((best_at(pa, horizon) - 1) / (horizon / 60), 3)
        if horizon
        else None,
        "speedup_gain_per_gpu_minute_b": round((best_at(pb, horizon) - 1) / (horizon / 60), 3)
        if horizon
        else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Print JSON summaries of run directories, and a comparison of two of them."""
    p = argparse.ArgumentParser(prog="python -m kernelsmith.search.efficiency", description=__doc__)
    p.add_argument("runs", nargs="*", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = p.parse_args(argv)
    out = {"runs": [run_summary(r) for r in args.runs]}
    if args.compare:
        out["compare"] = compare(*args.compare)
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
