"""Where one referee worker's time goes per candidate: boot phases, then the base file evaluated as
candidates with staged timing (two far below the contender bar, two at the bar), printing each
verdict's eval_s, details.phase_s, timing depth and input-cache counters as JSON lines.

    python3 scripts/phase_probe.py TARGET OP [--checkout DIR] [--device cuda] [--candidates N]

Uses only Referee/load_task calls that predate the input cache, so with PYTHONPATH pointing at an
older checkout it measures the "before" side of a comparison with the same command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from kernelsmith.referee import Referee
from kernelsmith.target.task import load_task


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line for the boot and one per evaluation."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target")
    p.add_argument("op")
    p.add_argument("--checkout", default=None)
    p.add_argument("--targets", default="targets")
    p.add_argument("--device", default="cuda")
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    task = load_task(args.target, args.op, checkout=args.checkout, targets=args.targets)
    with Referee(task, device=args.device, seed=args.seed) as ref:
        t0 = time.monotonic()
        ref.start()
        print(json.dumps({"boot_s": round(time.monotonic() - t0, 3), "boot_phases": ref.boot_phases}))
        for i in range(args.candidates):
            bar = 1000.0 if i < args.candidates // 2 else 1.0  # unreachable, then reached by any
            v = ref.evaluate(task.base_code, candidate_id=i + 1, timing="staged", contender_at=bar)
            d = v.details or {}
            print(json.dumps({"candidate": i + 1, "contender_at": bar, "accepted": v.accepted,
                              "reason": v.reason, "eval_s": v.eval_s,
                              "timing_depth": d.get("timing_depth") or (v.timing or {}).get("mode"),
                              "geomean_speedup": v.geomean_speedup, "phase_s": d.get("phase_s"),
                              "input_cache": d.get("input_cache")}))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
