#!/usr/bin/env bash
# Search on the GPU (issue 3): `kernelsmith optimize --mutator params` on each demo operator, the
# params-vs-grid comparison at equal GPU time on silu_and_mul, and (with two GPUs) evaluations per
# minute on two GPUs against one. Runs from the repo root with PYTHONPATH set; results in $OUT/optimize.
# Each run is capped by --minutes and a timeout so the step stays well under 5 minutes.
set -uo pipefail
D="$OUT/optimize"
rm -rf "$D"
mkdir -p "$D"
export KERNELSMITH_TARGETS="$PWD/targets"
status=0

run() {  # name, then optimize arguments
  local name=$1
  shift
  local start=$SECONDS
  timeout 170 python3 -m kernelsmith optimize "$@" --out "$D/$name" --no-progress --seed 0 >"$D/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s (log: $D/$name.log)"
  tail -n 3 "$D/$name.log"
  if [ "$rc" -gt 1 ]; then status=1; fi
}

run rms_norm-params demo rms_norm --mutator params --budget 16 --minutes 0.8
run silu-params demo silu_and_mul --mutator params --budget 24 --minutes 0.8
run silu-grid demo silu_and_mul --mutator grid --budget 24 --minutes 0.8

gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
extra=()
if [ "$gpus" -ge 2 ]; then
  run silu-params-2gpu demo silu_and_mul --mutator params --budget 24 --minutes 0.8 --gpus 0,1
  extra=("$D/silu-params-2gpu")
fi

python3 -m kernelsmith.search.efficiency "$D/rms_norm-params" "$D/silu-params" "$D/silu-grid" "${extra[@]}" \
  --compare "$D/silu-params" "$D/silu-grid" | tee "$D/summary.json" || status=1
for r in rms_norm-params silu-params; do
  [ -f "$D/$r/report.md" ] && { echo "=== $r/report.md"; sed -n '1,20p' "$D/$r/report.md"; }
done
exit $status
