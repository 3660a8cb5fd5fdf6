#!/usr/bin/env bash
# Search on the GPU (issue 3), on demo silu_and_mul, each run capped by OPT_MINUTES (default 2):
#   silu-params   --mutator params on GPU 0
#   silu-grid     --mutator grid on GPU 0 (the same space swept in order: equal GPU time)
#   silu-params-2gpu  --mutator params on GPUs 0,1 (only where two GPUs exist)
# Summary (efficiency.py): geomean, winner % of copy bandwidth, evaluations per GPU-minute (referee
# time and held GPU time), per wall-minute, and params vs grid at equal GPU time. Results in $OUT/optimize.
set -uo pipefail
D="$OUT/optimize"
rm -rf "$D"
mkdir -p "$D"
export KERNELSMITH_TARGETS="$PWD/targets"
MIN=${OPT_MINUTES:-2}
# OPT_STAGNATION: proposals without a better candidate before a run stops (default: optimize's own,
# 30 for a time-budgeted run); raise it to measure throughput over the whole OPT_MINUTES.
STAG=()
[ -n "${OPT_STAGNATION:-}" ] && STAG=(--stagnation "$OPT_STAGNATION")
OPS=${OPT_RUNS:-"silu-params silu-grid silu-params-2gpu"}
status=0

run() {  # name, then optimize arguments
  local name=$1
  shift
  local start=$SECONDS
  timeout $((${MIN%.*} * 60 + 120)) python3 -m kernelsmith optimize "$@" "${STAG[@]}" --out "$D/$name" \
    --no-progress --seed 0 >"$D/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s (log: $D/$name.log)"
  tail -n 3 "$D/$name.log"
  if [ "$rc" -gt 1 ]; then status=1; fi
}

gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
done_runs=()
for name in $OPS; do
  case $name in
    silu-params) run "$name" demo silu_and_mul --mutator params --minutes "$MIN" --gpus 0 ;;
    silu-grid) run "$name" demo silu_and_mul --mutator grid --minutes "$MIN" --gpus 0 ;;
    rms-params) run "$name" demo rms_norm --mutator params --minutes "$MIN" --gpus 0 ;;
    silu-params-2gpu)
      [ "$gpus" -ge 2 ] || continue
      run "$name" demo silu_and_mul --mutator params --minutes "$MIN" --gpus 0,1 ;;
  esac
  [ -f "$D/$name/result.json" ] && done_runs+=("$D/$name")
done

cmp=()
[ -f "$D/silu-params/result.json" ] && [ -f "$D/silu-grid/result.json" ] && cmp=(--compare "$D/silu-params" "$D/silu-grid")
python3 -m kernelsmith.search.efficiency "${done_runs[@]}" "${cmp[@]}" | tee "$D/summary.json" || status=1
for r in silu-params silu-params-2gpu; do
  [ -f "$D/$r/report.md" ] && { echo "=== $r/report.md"; sed -n '1,16p' "$D/$r/report.md"; }
done
exit $status
