"""What the referee says about the demo silu_and_mul base as the device memory left to it shrinks
(a ballast tensor in this process holds the rest): its verdict, the memory decisions, and the
error text where it is rejected. Looks for the floor where a child dies before any shape is judged.

    PYTHONPATH=$PWD python3 -P dev/gpu/memory_floor.py [GIB_LEFT ...]   (default 5 4.25 3.5 3 2.5)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def judge_with(left: float) -> None:
    """Judge the demo base with `left` GiB of the device free; print what came back."""
    import torch

    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee

    task = load_task(str(ROOT / "targets" / "demo.yaml"), "silu_and_mul",
                     checkout=str(ROOT / "examples" / "miniserve"))
    free, _ = torch.cuda.mem_get_info()
    held = torch.empty(free - int(left * GIB), dtype=torch.uint8, device="cuda")
    try:
        with Referee(task, device="cuda", seed=11) as ref:
            v = ref.evaluate(None, candidate_id=0, timing="screen")
    finally:
        del held
        torch.cuda.empty_cache()
    memory = v.details.get("memory") or {}
    print(f"== {left} GiB left: accepted={v.accepted} violations={v.violations}")
    print("   messages:", (v.details.get("messages") or [])[:3])
    print("   memory_short:", v.details.get("memory_short"))
    decisions = (memory.get("decisions") or []) + (memory.get("boot_decisions") or [])
    print("   decisions:", [d["action"] for d in decisions])
    if v.error:
        print("   error:", v.error[-3000:])


def main(argv: list[str]) -> int:
    """Judge at each amount left, largest first."""
    import torch

    torch.cuda.init()
    for left in [float(a) for a in argv] or [5, 4.25, 3.5, 3, 2.5]:
        judge_with(left)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
