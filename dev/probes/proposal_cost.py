"""The search loop's own cost per generation, replayed from a finished params run on this CPU:
`python3 dev/probes/proposal_cost.py RUN_DIR [--step 2]`.

For every `step` rows of the archive, in id order, it does what the loop does before a generation
(read the rows, rebuild the population, sync the params mutator, propose `batch` configs) on the
rows up to there, and prints the mean seconds of each part per band of 60 rows, plus how many
sampler asks the proposals took. A CPU cost, not a GPU claim: the GPU idles on it only when the
window runs dry (result.json `evaluator[].idle_nothing_queued_s`). The run's target must load here
(its checkout at run.json's path).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from kernelsmith.onboard.task import load_task
from kernelsmith.runspec import RunSpec
from kernelsmith.search.archive import Archive
from kernelsmith.search.mutator_set import build_mutators
from kernelsmith.search.mutators import studies
from kernelsmith.search.seeds import slot_rng
from kernelsmith.search.selection import Population, SelectionConfig

PARTS = ("read rows", "population", "sync", "propose")


def main() -> None:
    """Print the per-generation cost table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--step", type=int, default=2, help="rows between replayed generations (the batch)")
    args = ap.parse_args()
    run = RunSpec.load(args.run)
    task = load_task(run.target, run.op, checkout=run.checkout, harness="facts")
    archive = Archive(args.run / "archive.sqlite")
    mutators = build_mutators("params", task, "cuda", 40, lambda _msg: None)
    population = Population(SelectionConfig(islands=run.islands, exploit=float(run.exploit)),
                            task.base_code)
    asks = [0]
    real_ask = studies.Study.ask

    def counted(self, seed):
        asks[0] += 1
        return real_ask(self, seed)

    studies.Study.ask = counted  # this process only: a replay, not a run
    bands: dict[int, list[float]] = defaultdict(lambda: [0.0] * (len(PARTS) + 2))
    last = max((r.id for r in archive.all()), default=0)
    for n in range(min(20, last), last + 1, args.step):
        t = [time.perf_counter()]
        rows = [r for r in archive.all() if r.id <= n]
        t.append(time.perf_counter())
        population.rebuild(rows, archive.migrations())
        t.append(time.perf_counter())
        for m in mutators:
            m.sync(rows)
        t.append(time.perf_counter())
        known = {r["code_hash"] for r in rows if r["code_hash"]}
        asks[0] = 0
        for slot in range(args.step):
            rng = slot_rng(run.seed, 10_000 + n, slot)
            parent, inspirations = population.sample(slot % run.islands, rng)
            mutators[0].propose(parent, inspirations, rng, known)
        t.append(time.perf_counter())
        band = bands[n // 60]
        for i in range(len(PARTS)):
            band[i] += t[i + 1] - t[i]
        band[-2] += asks[0]
        band[-1] += 1
    print("| rows | " + " | ".join(f"{p} s" for p in PARTS) + " | total s | sampler asks |")
    print("|---|" + "---:|" * (len(PARTS) + 2))
    for b, v in sorted(bands.items()):
        k = v[-1]
        cells = [f"{x / k:.3f}" for x in v[: len(PARTS)]]
        print(f"| {b * 60}-{b * 60 + 59} | " + " | ".join(cells) + f" | {sum(v[: len(PARTS)]) / k:.3f} | "
              f"{v[-2] / k:.1f} |")


if __name__ == "__main__":
    main()
