#!/usr/bin/env bash
# GPU step (issue 11): `optimize --mutator params` at different `--pipeline` depths on one operator,
# one after the other with the same seed, then dev/probes/run_table.py over the run directories
# (evaluations, evaluations per held GPU-minute, first candidate verdict, compile wait, finalists
# re-measured or skipped, builds moved off the window's front). Results under $OUT/pipeline/.
#   LMDEPLOY_CHECKOUT=/path bash dev/gpu/gpu.d/45-pipeline.sh
# PIPE_OP: target:operator (default lmdeploy:multinomial_sampling, the heaviest harness);
# PIPE_DEPTHS: depths, "default" for none given (default "2 default"); PIPE_MINUTES: each run's
# --minutes (default 3: two runs and the finals fit one 10-minute device command).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
D="$OUT/pipeline"
mkdir -p "$D"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export KERNELSMITH_TARGETS="$PWD/targets"
PAIR=${PIPE_OP:-lmdeploy:multinomial_sampling}
DEPTHS=${PIPE_DEPTHS:-"2 default"}
MIN=${PIPE_MINUTES:-3}
target=${PAIR%%:*} op=${PAIR#*:}

. dev/gpu/gpu_lib.sh  # checkout_for

co=$(checkout_for "$target")
if [ -z "$co" ] || [ ! -d "$co" ]; then
  echo "pipeline: no checkout for $target: skipping"
  exit 0
fi
for depth in $DEPTHS; do
  run="$D/$target-$op-pipeline-$depth"
  rm -rf "$run"
  extra=()
  [ "$depth" = default ] || extra=(--pipeline "$depth")
  # Boot (15 s), the search's minutes and the finals (6-10 s each on the sampler: new inputs for
  # new seeds); two 3-minute runs stay under one 10-minute device command.
  timeout $(( ${MIN%.*} * 60 + 110 )) python3 -m kernelsmith optimize "$target" "$op" --checkout "$co" \
    --mutator params --minutes "$MIN" --gpus 0 --device cuda --seed 0 --stagnation 100000 --no-progress \
    "${extra[@]}" --out "$run" > "$run.log" 2>&1
  echo "pipeline $depth $target $op: exit $? ($(tail -n 1 "$run.log"))"
done
python3 dev/probes/run_table.py "$D" | tee "$D/summary.md"
