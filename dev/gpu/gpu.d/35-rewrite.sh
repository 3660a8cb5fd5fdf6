#!/usr/bin/env bash
# GPU step: the rewrite mutator against params alone, and both together (`all` without a model),
# on SGLang merge_state, LMDeploy apply_rotary_pos_emb / silu_and_mul and the demo kernels.
#   SGLANG_CHECKOUT=/path LMDEPLOY_CHECKOUT=/path bash dev/gpu/gpu.d/35-rewrite.sh
# One lane per visible GPU (REWRITE_GPUS="0 1 2 3" to pick), the runs dealt round-robin; each run is
# `optimize --mutator M --minutes REWRITE_MINUTES` (default 1.0) with the same seed, so every
# mutator gets the same wall time per operator. About 15 runs: ~6 minutes on 4 GPUs.
# Writes $OUT/rewrite/: run directories, logs (the rewrite mutator's declines are in them) and
# summary.md (per run: proposals, winner's mutator lineage, geomean, % roofline on the largest shape).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
DEST="$OUT/rewrite"
mkdir -p "$DEST"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset KERNELSMITH_LLM_BASE_URL OPENAI_BASE_URL OPENAI_API_KEY  # `all` = params + rewrite here
KS="python3 -m kernelsmith"
MINUTES=${REWRITE_MINUTES:-1.0}
DEVICE=${REWRITE_DEVICE:-cuda}  # interpret: a CPU dry run of this script (no timing)
MUTATORS=${REWRITE_MUTATORS:-"params rewrite all"}
OPS=${REWRITE_OPS:-"sglang:merge_state lmdeploy:apply_rotary_pos_emb lmdeploy:silu_and_mul demo:rms_norm demo:silu_and_mul"}
read -r -a LANES <<< "${REWRITE_GPUS:-$(python3 -c "import torch; print(*range(torch.cuda.device_count()))" 2>/dev/null)}"
[ "${#LANES[@]}" -gt 0 ] || LANES=(0)

. dev/gpu/gpu_lib.sh  # checkout_for

# First: every default-knob rewrite of the test kernels (and of merge_state), and every loop-invariant
# hoist (test kernels, LMDeploy silu_and_mul), must compile and pass the
# referee on CUDA (Triton's GPU compiler is stricter than the interpreter). REWRITE_PYTEST=0 skips it.
if [ "${REWRITE_PYTEST:-1}" = 1 ]; then
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/search/test_search_rewrite_real.py \
    tests/search/test_search_rewrite_hoist.py 2>&1 | tail -15 | tee "$DEST/pytest-gpu.txt"
fi

JOBS=()
for pair in $OPS; do
  target=${pair%%:*}
  co=$(checkout_for "$target")
  if [ -z "$co" ] || [ ! -d "$co" ]; then
    echo "35-rewrite: no checkout for $target (${target^^}_CHECKOUT): skipping $pair" | tee -a "$DEST/skipped.txt"
    continue
  fi
  for m in $MUTATORS; do JOBS+=("$pair:$m"); done
done

run_one() {  # target:op:mutator
  local target op m co run
  IFS=: read -r target op m <<< "$1"
  co=$(checkout_for "$target")
  run="$DEST/runs/$target-$op-$m"
  rm -rf "$run"
  timeout 300 $KS optimize "$target" "$op" --checkout "$co" --out "$run" --minutes "$MINUTES" \
    --mutator "$m" --device "$DEVICE" --seed 0 --no-progress > "$DEST/$target-$op-$m.log" 2>&1
  echo "optimize $target $op --mutator $m: exit $? (GPU ${CUDA_VISIBLE_DEVICES:-all})" | tee -a "$DEST/exits.txt"
}

for li in "${!LANES[@]}"; do
  (
    export CUDA_VISIBLE_DEVICES=${LANES[$li]}
    for ji in "${!JOBS[@]}"; do
      [ $((ji % ${#LANES[@]})) -eq "$li" ] && run_one "${JOBS[$ji]}"
    done
  ) &
done
wait

python3 - "$DEST" <<'PY' | tee "$DEST/summary.md"
import json, sqlite3, sys
from pathlib import Path

dest = Path(sys.argv[1])
print("| run | proposals (by mutator) | winner lineage | geomean | % roofline per shape | wall s |")
print("|---|---|---|---:|---:|---:|")
for run in sorted((dest / "runs").glob("*")):
    res = run / "result.json"
    if not res.is_file():
        print(f"| {run.name} | no result.json (see the log) | | | | |")
        continue
    r = json.loads(res.read_text())
    db = sqlite3.connect(run / "archive.sqlite")
    rows = {i: (m, p, params) for i, m, p, params in
            db.execute("SELECT id, mutator, parent_id, params FROM candidates")}
    counts = {}
    for m, _, _ in rows.values():
        counts[m] = counts.get(m, 0) + 1
    lineage, cid = [], (r.get("winner") or {}).get("id")
    while cid in rows:
        m, parent, params = rows[cid]
        knobs = (json.loads(params) if params else {}) or {}
        what = knobs.get("key", "").split("#")[0] if m == "rewrite" else ""
        lineage.append(f"{m}{' ' + what if what else ''}")
        cid = parent
    shapes = r.get("shapes") or []
    roof = "/".join(f"{s['pct_roofline']:.0f}" if s.get("pct_roofline") is not None else "-" for s in shapes)
    g = r.get("geomean_speedup")
    print(f"| {run.name} | {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))} | "
          f"{' <- '.join(lineage) or 'none'} | {g if g is None else f'{g:.2f}x'} | "
          f"{roof or '-'} | {r.get('wall_s') or 0:.0f} |")
PY
for d in "$DEST"/runs/*/winner/winner.diff; do
  [ -f "$d" ] && { echo "### ${d#"$DEST"/runs/}"; echo '```diff'; cat "$d"; echo '```'; } >> "$DEST/diffs.md"
done
cat "$DEST/exits.txt"
