"""What the sandbox costs: process start-up, and a referee worker's replacement, with and without it.

    python dev/probes/sandbox_overhead.py [--device auto|cuda|interpret] [--repeat N]

A worker is replaced after every rejected candidate (a fork of the zygote, then its CUDA context
and base kernels); this times `repeat` such replacements with the sandbox on and off (each worker
is forked into a PID namespace of its own inside it) and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernelsmith import sandbox  # noqa: E402


def startup(on: bool, n: int = 10) -> float:
    """Median seconds to run `python -c pass` (in the candidate sandbox when `on`)."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(n):
            (sandbox.enable if on else sandbox.disable)()
            cmd, env = sandbox.wrap([sys.executable, "-S", "-c", "pass"], "candidate", env=dict(os.environ),
                                    writable=[tmp])
            t = time.perf_counter()
            subprocess.run(cmd, env=env, check=True)
            times.append(time.perf_counter() - t)
    sandbox.enable()
    return statistics.median(times)


def replacements(on: bool, device: str, repeat: int) -> dict:
    """Seconds per worker replacement (rejected candidate -> new worker -> its first verdict)."""
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee

    (sandbox.enable if on else sandbox.disable)()
    task = load_task(str(ROOT / "targets" / "demo.yaml"), "silu_and_mul",
                     checkout=str(ROOT / "examples" / "miniserve"))
    cheat = (ROOT / "tests" / "referee" / "cheats" / "silu_and_mul__noop.py").read_text()
    try:
        with Referee(task, device=device, seed=1, prefork=False) as ref:
            t = time.perf_counter()
            ref.evaluate(None, timing="none")
            first = time.perf_counter() - t
            per = []
            for i in range(repeat):
                ref.evaluate(cheat, candidate_id=100 + i, timing="none")  # rejected: the worker goes
                t = time.perf_counter()
                ref.evaluate(None, candidate_id=200 + i, timing="none")  # a new worker boots for this
                per.append(time.perf_counter() - t)
    finally:
        sandbox.enable()
    return {"first_worker_s": round(first, 3), "replacement_s": round(statistics.median(per), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    out = {"probe": sandbox.probe() or "ok",
           "startup_s": {"sandbox": round(startup(True), 4), "plain": round(startup(False), 4)},
           "worker": {"sandbox": replacements(True, args.device, args.repeat),
                      "plain": replacements(False, args.device, args.repeat)}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
