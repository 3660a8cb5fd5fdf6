#!/usr/bin/env bash
# What a fresh runner per candidate costs: `optimize` with `--mutator params` (kernelsmith's own
# renderings: the runner is kept) and `--mutator rewrite` (a fresh runner per candidate) on LMDeploy's
# multinomial_sampling (full vocabulary), the tree before fresh runners (.head/before,
# `git archive` of that commit's kernelsmith/) and the current tree, alternating, same seed and
# minutes, in one device call. Prints evaluations per held GPU-minute per run and the ratio.
#   bash dev/gpu/fresh_runners.sh
# Needs .carry/lmdeploy (LMDeploy's kernels/ folder) and .carry/wheels (optuna) carried in.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
D="$OUT/fresh-runners"
mkdir -p "$D"
export KERNELSMITH_TARGETS="$PWD/targets" PYTHONUNBUFFERED=1
export KERNELSMITH_CACHE=${KERNELSMITH_CACHE:-/tmp/kernelsmith-cache}
WHEELS="$PWD/.carry/wheels"
run() {  # name tree target op checkout minutes mutator
  local name=$1 tree=$2 target=$3 op=$4 co=$5 min=$6 mutator=${7:-params} t0=$SECONDS
  # -P: the current folder is not put first on the path, so the tree named here is the one imported.
  PYTHONPATH="$tree:$WHEELS" timeout $(python3 -c "print(int($min * 60 + 150))") \
    python3 -P -m kernelsmith optimize "$target" "$op" --checkout "$co" --mutator "$mutator" --seed 0 \
    --device cuda --minutes "$min" --out "$D/$name" --no-progress > "$D/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s"
  PYTHONPATH="$PWD:$WHEELS" python3 - "$D/$name" <<'PY'
import json, sys
from pathlib import Path
from kernelsmith.search.efficiency import run_summary
run = Path(sys.argv[1])
try:
    res = json.loads((run / "result.json").read_text())
except OSError:
    print("  no result.json"); sys.exit()
s = run_summary(run)
print(f"  evaluations {res.get('evaluations')} wall_s {res.get('wall_s')} winner {res.get('geomean_speedup')}"
      f" evals/held GPU-min {s.get('evals_per_held_gpu_minute')}")
PY
}
# FR_RUNS: which runs, as target:op:mutator:minutes (default: the sampler with params, the demo with
# rewrite: kernelsmith's renderings keep their runner, the rewrite mutator's candidates get fresh ones).
RUNS=${FR_RUNS:-"lmdeploy:multinomial_sampling:params:1.5 demo:rms_norm:rewrite:1"}
for spec in $RUNS; do
  IFS=: read -r target op mutator min <<< "$spec"
  co=$([ "$target" = demo ] && echo "$PWD/examples/miniserve" || echo "$PWD/.carry/$target")
  for tree in before after; do
    t=$([ $tree = before ] && echo "$PWD/.head/before" || echo "$PWD")
    run "$target-$op-$mutator-$tree" "$t" "$target" "$op" "$co" "$min" "$mutator"
  done
done
# The fresh runners' own numbers: how long each evaluation waited for its runner.
PYTHONPATH="$PWD" python3 - "$D" <<'PY'
import json, sqlite3, statistics, sys
from pathlib import Path
for run in sorted(Path(sys.argv[1]).glob("*-after")):
    db = run / "archive.sqlite"
    if not db.exists():
        continue
    waits = []
    for (v,) in sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("select verdict from candidates"):
        r = (json.loads(v or "{}").get("details") or {}).get("runner") or {}
        if "fresh_wait_s" in r:
            waits.append(r["fresh_wait_s"])
    if waits:
        print(f"{run.name}: {len(waits)} evaluations waited for a fresh runner: median "
              f"{statistics.median(waits):.3f} s, max {max(waits):.3f} s, total {sum(waits):.1f} s")
PY
