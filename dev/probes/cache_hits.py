"""Per verdict: the input cache's hits and misses and the memory decisions, for the base judged
again and again by one Referee (every verdict asks for the same entries in the same order): how
much of each verdict goes to making inputs again where the shapes do not fit the device together.

On the CPU (the Triton interpreter) with a simulated device of `--cap` bytes, on the referee tests'
fill_slots harness (three caches of 0.5, 1 and 2 MiB: the LMDeploy fill_kv_cache pattern):

    PYTHONPATH=$PWD python3 dev/probes/cache_hits.py --cap 56000000

On a GPU, on a real operator (the device's own free memory, or `--cap`):

    PYTHONPATH=$PWD python3 dev/probes/cache_hits.py --target lmdeploy --op fill_kv_cache@decode \
        --checkout .carry/lmdeploy --device cuda --timing full
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _task(args):
    """The operator to judge: a real target's, or the tests' fill_slots on a tiny checkout."""
    if args.target:
        from kernelsmith.onboard.task import load_task

        return load_task(args.target, args.op, checkout=args.checkout, targets=str(ROOT / "targets"))
    sys.path[:0] = [str(ROOT / "tests" / "referee"), str(ROOT / "tests")]
    from test_memory import CACHES
    from tiny_project import tiny_task

    return tiny_task(Path(tempfile.mkdtemp(prefix="cache-hits-")), "fill_slots", "fill_slots", CACHES)


def main() -> int:
    """Judge the base `--evaluations` times; one line per verdict (and its decisions, `--decisions`)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cap", type=int, default=None, help="simulated device bytes (required on the CPU)")
    p.add_argument("--target"), p.add_argument("--op"), p.add_argument("--checkout")
    p.add_argument("--device", default="interpret")
    p.add_argument("--timing", default="none")
    p.add_argument("--evaluations", type=int, default=5)
    p.add_argument("--decisions", action="store_true", help="print every memory decision")
    args = p.parse_args()
    from kernelsmith.referee import Referee

    task = _task(args)
    with Referee(task, device=args.device, seed=3, timeout_s=900, device_memory_bytes=args.cap) as ref:
        for i in range(args.evaluations):
            t = time.monotonic()
            v = ref.evaluate(None, candidate_id=i, timing=args.timing)
            cache, memory = v.details.get("input_cache", {}), v.details.get("memory", {})
            actions: dict[str, int] = {}
            for d in memory.get("decisions", []):
                name = f"{d['action']}: {d.get('step')}"
                actions[name] = actions.get(name, 0) + 1
            print(json.dumps({"verdict": i, "accepted": v.accepted, "s": round(time.monotonic() - t, 1),
                              "check_s": [s.get("check_s") for s in v.shapes or []],
                              **{k: cache.get(k) for k in ("hits", "misses", "make_inputs", "evictions")},
                              "decisions": actions}))
            if args.decisions:
                print("   sizes:", json.dumps({"held": memory.get("held"), "shapes": memory.get("shapes")}))
                for d in memory.get("decisions", []):
                    print("   ", json.dumps(d)[:300])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
