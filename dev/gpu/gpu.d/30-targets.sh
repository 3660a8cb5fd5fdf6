#!/usr/bin/env bash
# GPU step: the real targets (LMDeploy, SGLang) on the H200, from checkout folders carried in.
#   LMDEPLOY_CHECKOUT=/path SGLANG_CHECKOUT=/path bash dev/gpu/gpu.d/30-targets.sh
# For each operator: `evaluate` on its base; for the operators in OPTIMIZE: `optimize --mutator
# params` with a small budget, then `verify` (upstream tests + benchmark on base and winner).
# Writes everything under $OUT/targets/. docs/targets.md says how the checkout folders are made
# (no git or gitpython needed here: --checkout folders are identified by a content hash).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
DEST="$OUT/targets"
mkdir -p "$DEST"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
KS="python3 -m kernelsmith"
BUDGET=${TARGETS_BUDGET:-8}
# evaluate | optimize | all: the two phases can be run as separate device calls (each < 10 min)
PHASE=${TARGETS_PHASE:-all}
# target:operator pairs that get optimize + verify (the rest get a base evaluation only)
OPTIMIZE=${TARGETS_OPTIMIZE:-"lmdeploy:multinomial_sampling lmdeploy:fused_single_group_router lmdeploy:rms_norm lmdeploy:silu_and_mul lmdeploy:apply_rotary_pos_emb sglang:fused_rmsnorm"}
status=0

. dev/gpu/gpu_lib.sh  # checkout_for

for target in lmdeploy sglang; do
  co=$(checkout_for "$target")
  if [ -z "$co" ] || [ ! -d "$co" ]; then
    echo "30-targets: ${target^^}_CHECKOUT not set or missing: skipping $target" | tee -a "$DEST/summary.txt"
    continue
  fi
  $KS scan "$target" --checkout "$co" --json > "$DEST/$target-scan.json" 2> "$DEST/$target-scan.err" \
    || { echo "30-targets: scan $target failed (see $target-scan.err)"; status=1; }
  ops=$(python3 -c "import json,sys; print(' '.join(o['name'] for o in json.load(open(sys.argv[1]))['operators']))" \
        "$DEST/$target-scan.json" 2>/dev/null)
  [ "$PHASE" = optimize ] && continue
  for op in $ops; do
    timeout 180 $KS evaluate "$target" "$op" --checkout "$co" --device cuda --json \
      > "$DEST/$target-$op-base.json" 2> "$DEST/$target-$op-base.err"
    echo "evaluate $target $op (base): exit $?" | tee -a "$DEST/summary.txt"
  done
done

[ "$PHASE" = evaluate ] && OPTIMIZE=""
# TARGETS_MINUTES caps each search by time instead of TARGETS_BUDGET proposals. TARGETS_GPUS ("0 1",
# default: every visible GPU) runs one lane per GPU in parallel, the pairs dealt round-robin (each
# lane sees only its GPU).
MINUTES=${TARGETS_MINUTES:-}
# Default: a lane per visible GPU.
read -r -a LANES <<< "${TARGETS_GPUS:-$(python3 -c "import torch; print(*range(torch.cuda.device_count()))" 2>/dev/null)}"

optimize_and_verify() {  # target:op
  local target=${1%%:*} op=${1#*:} co run limit
  co=$(checkout_for "$target")
  [ -n "$co" ] && [ -d "$co" ] || return 0
  run="$DEST/runs/$target-$op"
  rm -rf "$run"
  if [ -n "$MINUTES" ]; then limit=(--minutes "$MINUTES"); else limit=(--budget "$BUDGET"); fi
  timeout 360 $KS optimize "$target" "$op" --checkout "$co" --out "$run" "${limit[@]}" \
    --mutator params --device cuda --no-progress > "$DEST/$target-$op-optimize.log" 2>&1
  echo "optimize $target $op: exit $? (GPU ${CUDA_VISIBLE_DEVICES:-all})" | tee -a "$DEST/summary.txt"
  if [ -f "$run/run.json" ]; then
    timeout 300 $KS verify "$run" --timeout 240 > "$DEST/$target-$op-verify.log" 2>&1
    echo "verify $target $op: exit $? ($(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['status'], '-', d['reason'])" "$run/verify.json" 2>/dev/null))" \
      | tee -a "$DEST/summary.txt"
  fi
}

if [ "${#LANES[@]}" -gt 1 ]; then
  read -r -a PAIRS <<< "$OPTIMIZE"
  for li in "${!LANES[@]}"; do
    (
      export CUDA_VISIBLE_DEVICES=${LANES[$li]}
      for pi in "${!PAIRS[@]}"; do
        [ $((pi % ${#LANES[@]})) -eq "$li" ] && optimize_and_verify "${PAIRS[$pi]}"
      done
    ) &
  done
  wait
else
  for pair in $OPTIMIZE; do optimize_and_verify "$pair"; done
fi
cat "$DEST/summary.txt"
exit $status
