"""How an optimize run spent its budget (issue 42): when it first had a measured best, and why it stopped.

    python3 dev/gpu/first_best.py RUN_DIR [RUN_DIR...]

One JSON line per run: the generation, candidate count and referee GPU-seconds (summed in evaluation
order, as kernelsmith.search.efficiency counts them) of its first full measurement and of its first
measured win (the winner rule, search/compare.py's win curve); the promotions (screens measured in
full although they lost a shape: search/rules.py PROMOTE_MARGIN); the stop reason; the minutes given
and the search's own minutes (result.json timeline.search_s); the launch space (result.json
`space`: distinct launches, how many judged, covered or not). The bar: a first full measurement
within the first minute, and search minutes >= 90% of those given unless the space was covered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelsmith.runspec import RunSpec
from kernelsmith.search.compare import win_curve
from kernelsmith.search.efficiency import candidate_rows


def summary(run_dir: Path) -> dict:
    """The run's first full measurement, first measured win, promotions and budget use."""
    run = RunSpec.load(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    rows = candidate_rows(run_dir)
    spent, first_full = 0.0, None
    for n, c in enumerate(rows, start=1):
        spent += c["eval_s"] or 0.0
        if first_full is None and c.trusted_speedup:
            first_full = {"generation": c.generation, "candidates": n, "gpu_s": round(spent, 1),
                          "speedup": round(c.trusted_speedup, 3)}
    wins = [(t, b) for t, b in win_curve(rows, run.seed) if b > 1.0]
    promoted = [c.id for c in rows if c.verdict and (c.verdict.details or {}).get("promoted")]
    search_s = (result.get("timeline") or {}).get("search_s")
    return {
        "run": str(run_dir),
        "op": result.get("op"),
        "first_full": first_full,
        "first_win": {"gpu_s": round(wins[0][0], 1), "speedup": round(wins[0][1], 3)} if wins else None,
        "promoted": promoted,
        "stop_reason": result.get("stop_reason"),
        "minutes": run.minutes,
        "search_minutes": round(search_s / 60, 2) if search_s is not None else None,
        "space": result.get("space"),
    }


def main(argv: list[str]) -> int:
    """Print one JSON line per run directory."""
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for arg in argv:
        print(json.dumps(summary(Path(arg))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
