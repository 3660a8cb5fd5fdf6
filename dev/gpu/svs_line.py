"""One line per sweep/optimize pair of dev/gpu/search_vs_sweep.sh, from their run directories and the
independent re-time (dev/gpu/retime.py --json):

    python3 dev/gpu/svs_line.py TARGET:OP[@VARIANT] SWEEP_DIR OPTIMIZE_DIR RETIME_JSON MINUTES [--json OUT]

operator, variant, the sweep's final geomean (its winner re-measured on new inputs by the referee),
optimize's, their ratio (a run without a winner keeps the base: 1.0 on its side), the minutes
optimize's search used of those given, evaluations per held GPU-minute of each (evaluations / (GPUs
x wall time), as kernelsmith.search.efficiency counts them), whether optimize covered its space (it
stopped with no new proposal to make) and how much of its grid the sweep judged, whether both runs
ended on the same winner code, the independent re-times of both winners and their ratio, and the
issue's bars (optimize at >= 95% and >= 100% of the sweep, a tie where both winners are the same
code: their final geomeans then differ by the two measurements' noise alone; >= 90% of its minutes
unless the space was covered).
A missing or failed run is said so on the line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _load(run_dir: Path) -> tuple[dict, dict] | None:
    try:
        return (json.loads((run_dir / "run.json").read_text()),
                json.loads((run_dir / "result.json").read_text()))
    except (OSError, json.JSONDecodeError):
        return None


def _winner_code(run_dir: Path) -> dict[str, str] | None:
    """The winner's files (name -> text), None where the run has none."""
    files = sorted((run_dir / "winner").glob("*.py")) if (run_dir / "winner").is_dir() else []
    return {f.name: f.read_text() for f in files} or None


def _evals_per_held_minute(run: dict, result: dict) -> float | None:
    gpus = max(1, len(run.get("gpus") or [None]))
    wall = result.get("wall_s")
    return round(result["evaluations"] / (gpus * wall / 60), 1) if wall else None


def _no_geomean(result: dict) -> str | None:
    """Why a finished run has no final geomean (None: it has one)."""
    if result.get("geomean_speedup") is not None:
        return None
    if not result.get("timed"):
        return "not timed (Triton interpreter)"
    return result.get("no_winner_reason") or "no winner"


def _kept(result: dict) -> float | None:
    """The run's outcome as a geomean over the base: its winner's, or 1.0 where a timed run ended
    without one (the bot keeps the base); None where it has neither."""
    if result.get("geomean_speedup") is not None:
        return result["geomean_speedup"]
    return 1.0 if result.get("timed") and result.get("no_winner_reason") else None


def _x(value) -> str:
    return f"{value:.3f}x" if isinstance(value, (int, float)) else "-"


def row(pair: str, sweep_dir: Path, opt_dir: Path, retime_json: Path, minutes: float) -> dict:
    """The pair's numbers (None where a run or the re-time is missing)."""
    target, _, name = pair.partition(":")
    op, _, variant = name.partition("@")
    out = {"target": target, "operator": op, "variant": variant or "(own harness)", "minutes": minutes}
    sweep, opt = _load(sweep_dir), _load(opt_dir)
    if sweep:
        run, res = sweep
        grid = res.get("sweep") or {}
        out |= {"sweep_final": res.get("geomean_speedup"),
                "sweep_evals_per_held_min": _evals_per_held_minute(run, res),
                "sweep_grid": f"{grid.get('evaluated')}/{grid.get('grid_size')}"
                + (" complete" if grid.get("complete") else ""),
                "sweep_no_winner": _no_geomean(res)}
    if opt:
        run, res = opt
        search_s = (res.get("timeline") or {}).get("search_s")
        stop = res.get("stop_reason") or ""
        out |= {"optimize_final": res.get("geomean_speedup"), "mutator": res.get("mutator"),
                "optimize_evals_per_held_min": _evals_per_held_minute(run, res),
                "optimize_minutes_used": round(search_s / 60, 2) if search_s is not None else None,
                # covered: every distinct launch measured (result.json `space`), or nothing left to propose
                "covered": bool((res.get("space") or {}).get("covered"))
                or stop.startswith(("search space covered", "search space exhausted")), "stop_reason": stop,
                "optimize_no_winner": _no_geomean(res)}
    try:
        retime = json.loads(retime_json.read_text())
    except (OSError, json.JSONDecodeError):
        retime = {}
    out["retime"] = retime.get("geomean") or {}
    out["retime_wrong"] = sorted(retime.get("wrong") or {})
    out["retime_device"] = retime.get("device")
    # A run without a winner keeps the base: its side of the ratio is 1.0 (both without one: 1.0).
    s, o = (_kept(sweep[1]) if sweep else None), (_kept(opt[1]) if opt else None)
    out["ratio"] = round(o / s, 4) if s and o else None
    code = _winner_code(sweep_dir)
    out["same_winner"] = code is not None and code == _winner_code(opt_dir)
    rs, ro = out["retime"].get("sweep"), out["retime"].get("optimize")
    out["retime_ratio"] = round(ro / rs, 4) if rs and ro else None
    used = out.get("optimize_minutes_used")
    out["bars"] = {
        "at_least_95pct": out["ratio"] is not None and out["ratio"] >= 0.95,
        "at_least_100pct": out["ratio"] is not None and (out["ratio"] >= 1.0 or out["same_winner"]),
        "minutes_spent": bool(out.get("covered")) or (used is not None and used >= 0.9 * minutes),
    }
    return out


def render(r: dict) -> str:
    """The row as one line."""
    used = r.get("optimize_minutes_used")
    spent = "-" if used is None else f"{used:.2f} of {r['minutes']:g} min ({100 * used / r['minutes']:.0f}%)"
    cover = ("no optimize run" if "covered" not in r
             else "space covered" if r["covered"] else "space not covered")
    missing = [w for w, k in (("sweep", "sweep_final"), ("optimize", "optimize_final")) if r.get(k) is None]
    why = "; ".join(f"{w}: {r.get(f'{w}_no_winner') or 'no finished run'}" for w in missing)
    retime = (f"retime sweep {_x(r['retime'].get('sweep'))} optimize {_x(r['retime'].get('optimize'))}"
              f" ratio {r['retime_ratio'] if r['retime_ratio'] is not None else '-'}"
              + (f" WRONG: {', '.join(r['retime_wrong'])}" if r["retime_wrong"] else ""))
    bars = " ".join(f"{k}={'yes' if v else 'NO'}" for k, v in r["bars"].items())
    return (f"{r['target']}:{r['operator']} | {r['variant']} | sweep {_x(r.get('sweep_final'))} "
            f"({r.get('sweep_grid', '-')}) | optimize {_x(r.get('optimize_final'))} "
            f"({r.get('mutator') or '-'}) "
            f"| ratio {r['ratio'] if r['ratio'] is not None else '-'}"
            f"{' (same winner code)' if r.get('same_winner') else ''} | {spent} "
            f"| evals/held GPU-min sweep {r.get('sweep_evals_per_held_min', '-')} "
            f"optimize {r.get('optimize_evals_per_held_min', '-')} | {cover} | {retime} | {bars}"
            + (f" | {why}" if why else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pair")
    p.add_argument("sweep", type=Path)
    p.add_argument("optimize", type=Path)
    p.add_argument("retime", type=Path)
    p.add_argument("minutes", type=float)
    p.add_argument("--json", type=Path, help="append the row here (one JSON object a line)")
    args = p.parse_args(argv)
    r = row(args.pair, args.sweep, args.optimize, args.retime, args.minutes)
    print(render(r))
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
