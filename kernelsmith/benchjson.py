"""benchmark.json: the referee's timings of base and winner in pytest-benchmark's JSON format.

One benchmark entry per (shape, side), grouped by shape, so `pytest-benchmark compare` and the
tools that read its files can show them. Statistics come from the referee's raw per-repetition
samples (milliseconds, converted to seconds) when the verdict carries them, else from its median
alone (then rounds is 1 and extra_info says so).
"""

from __future__ import annotations

import platform
import statistics
from datetime import datetime, timezone

from kernelsmith.runspec import RunSpec

BENCHMARK_FORMAT_VERSION = "4.0.0"


def _stats(samples_ms: list[float] | None, median_ms: float) -> tuple[dict, bool]:
    xs = sorted(s / 1e3 for s in (samples_ms or []) if s is not None)
    exact = len(xs) >= 2
    if not exact:
        xs = [median_ms / 1e3]
    n = len(xs)
    q1, q3 = (
        (statistics.quantiles(xs, n=4)[0], statistics.quantiles(xs, n=4)[2]) if n >= 2 else (xs[0], xs[0])
    )
    iqr = q3 - q1
    mean = statistics.fmean(xs)
    sd = statistics.stdev(xs) if n >= 2 else 0.0
    lo, hi = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    stats = {
        "min": xs[0],
        "max": xs[-1],
        "mean": mean,
        "stddev": sd,
        "rounds": n,
        "median": statistics.median(xs),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": sum(1 for x in xs if x < lo or x > hi),
        "stddev_outliers": sum(1 for x in xs if abs(x - mean) > sd) if sd else 0,
        "outliers": f"{sum(1 for x in xs if abs(x - mean) > sd) if sd else 0};"
        f"{sum(1 for x in xs if x < lo or x > hi)}",
        "ld15iqr": min((x for x in xs if x >= lo), default=xs[0]),
        "hd15iqr": max((x for x in xs if x <= hi), default=xs[-1]),
        "ops": 1.0 / mean if mean > 0 else 0.0,
        "total": sum(xs),
        "iterations": 1,
    }
    return stats, exact


def _shape_id(shape: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in shape.items())


def benchmark_json(run: RunSpec, result: dict, verdict_shapes: list[dict]) -> dict:
    """pytest-benchmark's document for a run: base and winner per shape (empty without timing)."""
    benches = []
    op = result.get("op") or run.op
    for s in verdict_shapes if result.get("timed") else []:
        if s.get("baseline_ms") is None or s.get("candidate_ms") is None:
            continue
        sid = _shape_id(s["shape"])
        samples = s.get("samples_ms") or {}
        for side, median, key in (
            ("base", s["baseline_ms"], "base"),
            ("winner", s["candidate_ms"], "candidate"),
        ):
            stats, exact = _stats(samples.get(key), median)
            benches.append(
                {
                    "group": f"{op}[{sid}]",
                    "name": f"{op}_{side}[{sid}]",
                    "fullname": f"kernelsmith::{op}::{side}[{sid}]",
                    "params": dict(s["shape"]),
                    "param": sid,
                    "extra_info": {
                        "side": side,
                        "speedup": s.get("speedup"),
                        "ci95": s.get("ci95"),
                        "pct_roofline": s.get("pct_roofline"),
                        "metric": "device time (CUDA events)",
                        "stats_from": "referee samples" if exact else "referee median only",
                    },
                    "options": {
                        "disable_gc": False,
                        "timer": "cuda_event",
                        "min_rounds": stats["rounds"],
                        "max_time": None,
                        "min_time": None,
                        "warmup": True,
                    },
                    "stats": stats,
                }
            )
    device = result.get("device") or {}
    return {
        "machine_info": {
            "node": platform.node(),
            "processor": platform.processor(),
            "machine": platform.machine(),
            "python_implementation": platform.python_implementation(),
            "python_version": platform.python_version(),
            "python_compiler": platform.python_compiler(),
            "release": platform.release(),
            "system": platform.system(),
            "cpu": {},
            "gpu": device.get("name"),
            "driver": device.get("driver"),
            "torch": device.get("torch"),
            "triton": device.get("triton"),
        },
        "commit_info": {
            "id": result.get("base_sha") or run.base_sha,
            "time": None,
            "author_time": None,
            "dirty": False,
            "project": result.get("repo") or run.repo,
            "branch": None,
        },
        "benchmarks": benches,
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": BENCHMARK_FORMAT_VERSION,
    }
