#!/usr/bin/env bash
# GPU step (issue 13, attack 3): what the judge/runner split costs. The same `optimize --mutator params`
# runs with this tree and with an older tree (JUDGE_BEFORE: a `git archive` of the commit before the
# split, carried in), alternating before/after per operator so cache warm-up does not favour one side.
# Prints, per run, evaluations, evaluations per held GPU-minute and the referee's phase medians
# (search/efficiency.py), and keeps the run directories under $OUT/judge-overhead/.
#   JUDGE_BEFORE=.carry/old LMDEPLOY_CHECKOUT=... bash dev/gpu/gpu.d/15-judge-overhead.sh
# JUDGE_OPS: target:operator pairs (default: the demo's silu_and_mul and LMDeploy's sampler, the
#   heaviest harness); JUDGE_MINUTES: each run's --minutes (default 1).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
D="$OUT/judge-overhead"
mkdir -p "$D"
export KERNELSMITH_TARGETS="$PWD/targets"
AFTER=$PWD
BEFORE=${JUDGE_BEFORE:-}
[ -n "$BEFORE" ] && BEFORE=$(cd "$BEFORE" && pwd)
OPS=${JUDGE_OPS:-"demo:silu_and_mul lmdeploy:multinomial_sampling"}
MIN=${JUDGE_MINUTES:-1}
EXTRA=${PYTHONPATH:-}

. dev/gpu/gpu_lib.sh  # checkout_for

one() {  # side tree target op
  local side=$1 tree=$2 target=$3 op=$4 co
  co=$(checkout_for "$target")
  [ -n "$co" ] && [ -d "$co" ] || { echo "judge-overhead: no checkout for $target: skipping"; return; }
  local run="$D/$target-$op-$side"
  rm -rf "$run"
  (cd "$tree" && PYTHONPATH="$tree${EXTRA:+:$EXTRA}" KERNELSMITH_TARGETS="$tree/targets" \
    timeout $(( ${MIN%.*} * 60 + 150 )) python3 -m kernelsmith optimize "$target" "$op" --checkout "$co" \
    --mutator params --minutes "$MIN" --gpus 0 --device cuda --seed 0 --stagnation 1000 --no-progress \
    --out "$run" > "$run.log" 2>&1)
  echo "$side $target $op: exit $? ($(tail -n 1 "$run.log"))"
}

for pair in $OPS; do
  target=${pair%%:*} op=${pair#*:}
  [ -n "$BEFORE" ] && one before "$BEFORE" "$target" "$op"
  one after "$AFTER" "$target" "$op"
done

python3 dev/probes/run_table.py "$D" | tee "$D/summary.md"
