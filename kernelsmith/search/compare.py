"""Search runs against a `kernelsmith sweep` of the same operator:
`python -m kernelsmith.search.compare RUN_DIR RUN_DIR... [--json]`.

The reference is the sweep's target (result.json `sweep.target_geomean`): where the sweep measured
the per-shape table the params mutator's rule adopts (after a complete grid), that table's geomean
or the best single config's, whichever is higher; else its per-shape-best geomean (the best
measured config on each shape) where such a table beats its best single config by the params
mutator's margin, else that best single config, since the best of each shape
over many noisy screens is biased upward (SGLang fused_rmsnorm on the H200: 1.19x per shape, with
1.14x on its 5-microsecond 1-token shape; 1.13x for its best config, re-measured). `--reference X`
sets it by hand; `--reference final` takes the sweep's winner as re-measured on new inputs (its
final geomean: what the sweep delivers, where the best of hundreds of noisy screens runs high:
LMDeploy rms_norm, 1.042x best screen, 1.035x re-measured); without a sweep among the runs the
best search geomean is used (said so).
For each run: GPU-seconds until its best full measurement that is a measured win (evidence.py: the
rule a winner must pass, so a fast candidate that loses a shape counts for nothing; `--any` counts
every full, non-noisy one) reached 50/90/95% of the reference's gain over the base (1 + f x (reference
- 1): never below f x reference, and meaningful where the headroom is small: for a 1.03x reference,
95% of the geomean is 0.98x, which the base itself has), its final (re-measured winner's)
geomean, evaluations, evaluations per held GPU-minute, and its time to 95% as a share of the
sweep's GPU-seconds (the issue's bar: at most half; the header says whether the sweep judged its
whole grid); the time until a measured win's geomean 95% CI reached that 95% ("within CI": where the
gain is a few percent, full measurements of one launch set differ by more than the 5% of the gain the
bar leaves, so the strict column can miss a run that found the sweep's winner); then the best
speedup each run had reached at fractions of the sweep's GPU-seconds. GPU-seconds are referee
seconds summed in evaluation order (efficiency.py); held GPU time is wall time times GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.runspec import RunSpec, run_file
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.efficiency import (
    SWEEP_SHARE,
    best_at,
    candidate_rows,
    curve,
    gain_target,
    run_summary,
    time_to,
)
from kernelsmith.search.evidence import ci_seed, judge

FRACTIONS = (0.5, 0.9, SWEEP_SHARE)
CHECKPOINTS = (0.1, 0.25, 0.5, 0.75, 1.0)  # of the sweep's GPU-seconds


def _load(run_dir: Path) -> tuple[RunSpec, dict]:
    run = RunSpec.load(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    return run, result


def judged(row: Candidate, seed: int, memo: dict) -> dict:
    """evidence.judge of a row's verdict, once per row of a comparison (a bootstrap costs a fraction
    of a second, and both curves below ask)."""
    if row.id not in memo:
        memo[row.id] = judge(row.verdict_json, ci_seed(seed, row.id))
    return memo[row.id]


def win_curve(rows: list[Candidate], seed: int, memo: dict | None = None) -> list[tuple[float, float]]:
    """efficiency.curve counting only full measurements that are measured wins."""
    best, claimable, memo = 1.0, [], {} if memo is None else memo
    for r in rows:
        faster = (r.trusted_speedup or 0.0) > best  # a noisy one would fail judge() anyway
        # Judged only where it would raise the best so far (a bootstrap costs a fraction of a second).
        if faster and judged(r, seed, memo)["win"]:
            best = r.speedup
        elif r.accepted and r.depth == "full":
            r = r.with_columns(accepted=0)
        claimable.append(r)
    return curve(claimable)


def ci_curve(rows: list[Candidate], seed: int, memo: dict | None = None) -> list[tuple[float, float]]:
    """[(GPU-s, highest 95% CI upper bound of a measured win so far)]: from when a run held a kernel
    that cannot be told apart from a target (on a gain of 2.5% the full measurements of one launch
    set differ by more than the 5% of it that "95%" leaves)."""
    out, t, best, memo = [], 0.0, 1.0, {} if memo is None else memo
    for r in rows:
        if not r["eval_s"]:
            continue
        t += r["eval_s"]
        if r.depth == "full" and (r.trusted_speedup or 0.0) > 1.0:
            verdict = judged(r, seed, memo)
            if verdict["win"] and verdict["geomean_ci95"]:
                best = max(best, verdict["geomean_ci95"][1])
        out.append((t, best))
    return out


def sweep_reference(run: Path, sweep: dict) -> tuple[float | None, str]:
    """What a search is measured against, and why: the sweep's `target_geomean`, its per-shape best
    where a per-shape table beats its best single config by the params mutator's margin, else that
    best single config (a per-shape best taken over noisy screens alone is biased upward)."""
    per_shape, single = sweep.get("per_shape_best_geomean"), sweep.get("best_single_geomean")
    if sweep.get("target_geomean") is None:  # a sweep written before target_geomean existed
        return per_shape or single, f"per-shape best of sweep {run}"
    if sweep.get("table_id") is not None:
        got = sweep.get("table_geomean")
        return sweep["target_geomean"], (
            f"sweep {run}: the per-shape table it measured "
            + ("after its grid" if sweep.get("complete") else "once its time budget was spent")
            + f" (#{sweep['table_id']}, "
            + (f"{got:.3f}x" if got else "not faster at the screen")
            + f") or its best single config, whichever is higher; its per-shape best, "
            f"{per_shape or 0:.3f}x, is a maximum of single measurements, not a kernel")
    if sweep.get("per_shape_table_beats_single"):
        return sweep["target_geomean"], f"per-shape best of sweep {run} (a per-shape table pays)"
    return sweep["target_geomean"], (
        f"best single config of sweep {run}; its per-shape best, {per_shape or 0:.3f}x, is not a table "
        "that beats it by the params mutator's margin")


def compare_runs(run_dirs: list[Path], reference: float | str | None = None, wins_only: bool = True) -> dict:
    """The comparison as data: reference (a geomean, "final" for the sweep's re-measured winner, or
    None for the sweep's target), per-run rows and the speedup-vs-GPU-seconds table."""
    loaded = [(Path(d), *_load(Path(d))) for d in run_dirs]
    rows = {str(d): candidate_rows(d) for d, _, _ in loaded}
    memos: dict[str, dict] = {str(d): {} for d, _, _ in loaded}  # judge() per row, once per run
    curves = {str(d): (win_curve(rows[str(d)], run.seed, memos[str(d)]) if wins_only
                       else curve(rows[str(d)])) for d, run, _ in loaded}
    sweeps = [(d, res) for d, run, res in loaded if run.command == "sweep" and res.get("sweep")]
    source = "--reference"
    if reference == "final":
        if not sweeps or sweeps[0][1].get("geomean_speedup") is None:
            raise ValueError("--reference final needs a sweep with a winner among the runs")
        reference = sweeps[0][1]["geomean_speedup"]
        source = f"the winner of sweep {sweeps[0][0]}, re-measured on new inputs"
    if reference is None and sweeps:
        reference, source = sweep_reference(sweeps[0][0], sweeps[0][1]["sweep"])
    if reference is None:
        reference = max([pts[-1][1] for pts in curves.values() if pts] + [1.0])
        source = "best search geomean (no sweep among the runs)"
    runs = []
    for d, run, res in loaded:
        pts, summary = curves[str(d)], run_summary(d)
        gpu_s = pts[-1][0] if pts else 0.0
        reached = {f"{int(f * 100)}%": time_to(pts, gain_target(reference, f)) for f in FRACTIONS}
        within = time_to(ci_curve(rows[str(d)], run.seed, memos[str(d)]),
                         gain_target(reference, SWEEP_SHARE))
        runs.append({
            "run": str(d),
            "kind": "sweep" if run.command == "sweep" else f"optimize --mutator {run.mutator}",
            "gpus": summary["gpus"],
            "gpu_s": round(gpu_s, 2),
            "held_gpu_s": round(summary["gpus"] * (res.get("wall_s") or 0.0), 1),
            "gpu_s_to": {k: (round(v, 2) if v is not None else None) for k, v in reached.items()},
            "gpu_s_to_95_within_ci": round(within, 2) if within is not None else None,
            "search_best": round(pts[-1][1], 4) if pts else 1.0,
            "final_geomean": res.get("geomean_speedup"),
            "no_winner_reason": res.get("no_winner_reason"),
            "evaluations": res.get("evaluations"),
            "evals_per_held_gpu_minute": summary["evals_per_held_gpu_minute"],
        })
    longest = max([r["gpu_s"] for r in runs] + [0.0])
    horizon = next((r["gpu_s"] for r in runs if r["kind"] == "sweep"), longest)
    for r in runs:  # the issue's bar: 95% in at most half the sweep's GPU-seconds
        to95 = r["gpu_s_to"]["95%"]
        share = to95 / horizon if sweeps and to95 is not None and horizon else None
        r["share_of_sweep_gpu_s"] = round(share, 3) if share is not None else None
        within = r["gpu_s_to_95_within_ci"]
        share = within / horizon if sweeps and within is not None and horizon else None
        r["share_within_ci"] = round(share, 3) if share is not None else None
    table = [
        {"gpu_s": round(f * horizon, 2), **{str(d): round(best_at(curves[str(d)], f * horizon), 4)
                                            for d, _, _ in loaded}}
        for f in CHECKPOINTS
    ]
    grid = sweeps[0][1]["sweep"] if sweeps else {}
    return {"reference": round(reference, 4), "reference_source": source, "runs": runs,
            "has_sweep": bool(sweeps), "sweep_complete": grid.get("complete"),
            "sweep_evaluated": grid.get("evaluated"), "sweep_grid_size": grid.get("grid_size"),
            "sweep_distinct_launches": grid.get("distinct_launches"),
            "counted": "measured wins" if wins_only else "every full, non-noisy measurement",
            "reference_gpu_s": horizon, "speedup_vs_gpu_s": table}


def _f(x, fmt: str) -> str:
    return "never" if x is None else format(x, fmt)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _within(run: dict) -> str:
    """The within-CI time, with its share of the sweep's GPU-seconds where there is one."""
    share = run.get("share_within_ci")
    return _f(run.get("gpu_s_to_95_within_ci"), ".1f") + ("" if share is None else f" ({_pct(share)})")


def _coverage(data: dict) -> str:
    """How much of its grid the sweep judged: a complete grid's GPU-seconds are the whole sweep's."""
    if not data.get("has_sweep"):
        return "no sweep among the runs"
    if data.get("sweep_grid_size") is None:
        return "the sweep's result does not say how much of its grid it judged"
    done = "the complete grid" if data.get("sweep_complete") else "a partial grid"
    distinct = data.get("sweep_distinct_launches")
    of = f" ({distinct} distinct launches)" if distinct and distinct != data["sweep_grid_size"] else ""
    return f"{done}, {data.get('sweep_evaluated')} of {data['sweep_grid_size']} configs{of} judged"


def render(data: dict) -> str:
    """The comparison as two markdown tables."""
    ref = data["reference"]
    out = [f"Reference: {ref:.3f}x ({data['reference_source']}); a run's best counts "
           f"{data['counted']}; \"to 95%\": GPU-seconds until its best held 95% of the reference's "
           f"gain over the base ({gain_target(ref, SWEEP_SHARE):.3f}x); \"of sweep\": that time over the "
           f"sweep's GPU-seconds ({_coverage(data)}); \"within CI\": until a measured win whose "
           "geomean's 95% CI reaches that 95% (no measurement tells it apart from the target).", "",
           "| run | kind | GPUs | GPU-s | held GPU-s | GPU-s to 50% | to 90% | to 95% | of sweep "
           "| to 95% within CI (of sweep) | search best | final geomean | evaluations "
           "| evals / held GPU-min |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["runs"]:
        to = r["gpu_s_to"]
        final = _f(r["final_geomean"], ".3f") if r["final_geomean"] is not None else "no winner"
        out.append(
            f"| {Path(r['run']).name} | {r['kind']} | {r['gpus']} | {r['gpu_s']:.1f} | {r['held_gpu_s']:.1f} "
            f"| {_f(to['50%'], '.1f')} | {_f(to['90%'], '.1f')} | {_f(to['95%'], '.1f')} "
            f"| {_pct(r.get('share_of_sweep_gpu_s'))} "
            f"| {_within(r)} "
            f"| {r['search_best']:.3f}x | {final} | {r['evaluations']} "
            f"| {_f(r['evals_per_held_gpu_minute'], '.1f')} |"
        )
    names = [r["run"] for r in data["runs"]]
    out += ["", "Best speedup reached by GPU-seconds (fractions of the reference run's GPU-seconds):", "",
            "| GPU-s | " + " | ".join(Path(n).name for n in names) + " |",
            "|---:|" + "---:|" * len(names)]
    for row in data["speedup_vs_gpu_s"]:
        out.append(f"| {row['gpu_s']:.1f} | " + " | ".join(f"{row[n]:.3f}x" for n in names) + " |")
    return "\n".join(out)


def _reference(text: str) -> float | str:
    """--reference: a geomean, or the word 'final'."""
    if text == "final":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number nor 'final'") from None


def main(argv: list[str] | None = None) -> int:
    """Print the comparison of run directories (markdown, or JSON with --json)."""
    p = argparse.ArgumentParser(prog="python -m kernelsmith.search.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (a sweep and the searches)")
    p.add_argument("--reference", type=_reference,
                   help="the geomean the fractions are of, or 'final': the sweep's winner re-measured "
                        "(default: the sweep's target)")
    p.add_argument("--json", action="store_true", help="JSON instead of markdown tables")
    p.add_argument("--any", action="store_true",
                   help="count every full, non-noisy measurement, not only measured wins")
    args = p.parse_args(argv)
    missing = [str(r) for r in args.runs
               if not (r / "result.json").is_file() or not run_file(r).is_file()]
    if missing:
        print(f"compare: not a finished run directory (no run.json/result.json): {', '.join(missing)}",
              file=sys.stderr)
        return 2
    try:
        data = compare_runs(args.runs, args.reference, wins_only=not args.any)
    except (ValueError, ConfigError) as e:  # ConfigError: a run.json that is not one
        print(f"compare: {e}", file=sys.stderr)
        return 2
    print(json.dumps(data, indent=2) if args.json else render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
