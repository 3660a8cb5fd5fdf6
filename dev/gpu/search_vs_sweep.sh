#!/usr/bin/env bash
# Issue 42, "Show": per operator and harness variant, `kernelsmith sweep` and `kernelsmith optimize`
# with the same --minutes and --seed, then an independent re-time of both winners on new inputs
# (dev/gpu/retime.py: plain torch.cuda events, interleaved), and one line per pair
# (dev/gpu/svs_line.py): sweep and optimize final geomeans (re-measured), their ratio, minutes used,
# evaluations per held GPU-minute, space covered or not, the re-times, the issue's bars.
#   bash dev/gpu/search_vs_sweep.sh [PAIR...]          PAIR: target:op or target:op@variant
# Without PAIRs: `python3 dev/variants.py $SVS_SET` (SVS_SET: measured (default: the harnesses the
#   rules are tuned and reported on), tune, report, held-out, all).
# SVS_MINUTES (default 0.5): --minutes of each run. SVS_SEED (default 0): --seed of both.
# SVS_MUTATOR: optimize's --mutator (default: none given, optimize's own default).
# SVS_TOTAL_S (default 540): the step's budget; a pair that would not finish inside it is not
#   started (each lane's first pair always is), and the last line gives the command for the pairs left over (the next device call).
#   Whatever runs is killed by SVS_TOTAL_S + 45 s, so a call ends inside the device's 600 s; each
#   pair's line is in $OUT/svs-lines.txt as soon as it is done.
# SVS_OVERHEAD_S (default 45): a run's seconds beyond its minutes (start, harness facts, compile
#   processes, the base, the final re-measurement: 27-49 s measured for multinomial_sampling and
#   fill_kv_cache on 2 busy CPU cores under the interpreter, 0.25 min runs; on the H200 the demo's
#   commands took 10-14 s beyond wall_s, docs/benchmarks.md); SVS_RETIME_S (default 0.4): re-time
#   seconds per shape; SVS_RETIME_EST_S (default 35): a re-time's seconds in all (start, compiles,
#   inputs, reference, timing; 12-17 s on CPU).
# SVS_DEVICE (default cuda; interpret: a CPU dry run of the whole script, times meaningless).
# Checkouts: LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT (default .carry/lmdeploy, .carry/sglang:
#   dev/gpu/carry_checkouts.sh); Optuna from .carry/wheels (dev/gpu/carry_wheels.sh).
# Scheduling: with two or more GPUs, GPUs/2 lanes; a lane runs a pair's sweep and optimize at once,
#   one GPU each, then the re-time on its first GPU; with one GPU, sweep, optimize, re-time in turn.
#   0.5 min a side: about 2 x (30 + 45) + 35 = 185 s a pair on one GPU (2 or 3 pairs a call),
#   about 110 s a pair a lane with two GPUs.
# Results: $OUT/svs-lines.txt and svs-lines.jsonl (one row a pair), $OUT/svs.tgz (run directories,
#   logs, re-time JSON).
set -uo pipefail
cd "$(dirname "$0")/../.."
. dev/gpu/gpu_lib.sh  # fresh_out, tree_env, checkout_for
fresh_out svs
tree_env
PY=${PYTHON:-python3}
MIN=${SVS_MINUTES:-0.5}
SEED=${SVS_SEED:-0}
TOTAL=${SVS_TOTAL_S:-540}
OVERHEAD=${SVS_OVERHEAD_S:-45}
RETIME_S=${SVS_RETIME_S:-0.4}
RETIME_EST=${SVS_RETIME_EST_S:-35}
DEVICE=${SVS_DEVICE:-cuda}
LMDEPLOY_CHECKOUT=${LMDEPLOY_CHECKOUT:-$PWD/.carry/lmdeploy}
SGLANG_CHECKOUT=${SGLANG_CHECKOUT:-$PWD/.carry/sglang}
LINES="$OUT/svs-lines.txt"
: > "$OUT/svs-lines.jsonl"
start=$SECONDS

if [ "$#" -gt 0 ]; then
  pairs=("$@")
else
  mapfile -t pairs < <($PY dev/variants.py "${SVS_SET:-measured}")
fi
[ "${#pairs[@]}" -gt 0 ] || { echo "search_vs_sweep: no pair to run (SVS_SET=${SVS_SET:-measured})"; exit 2; }
for pair in "${pairs[@]}"; do
  co=$(checkout_for "${pair%%:*}")
  [ -n "$co" ] && [ -d "$co" ] || { echo "search_vs_sweep: no checkout for $pair ($co)"; exit 2; }
done

if [ "$DEVICE" = cuda ]; then
  gpus=$($PY -c "import torch; print(torch.cuda.device_count())")
  [ "$gpus" -ge 1 ] || { echo "search_vs_sweep: no CUDA device"; exit 2; }
else
  gpus=1
fi
lanes=$((gpus / 2))
paired=1
[ "$lanes" -ge 1 ] || { lanes=1; paired=0; }
per_run=$($PY -c "import sys; print(int(float(sys.argv[1]) * 60 + float(sys.argv[2])))" "$MIN" "$OVERHEAD")
limit=$((per_run + OVERHEAD))  # a run is killed past its minutes plus twice the overhead
per_pair=$(( (paired ? per_run : 2 * per_run) + RETIME_EST ))
{
  echo "# search vs sweep ($(date -u +%FT%TZ)): --minutes $MIN --seed $SEED${SVS_MUTATOR:+ --mutator $SVS_MUTATOR}, device $DEVICE"
  [ "$DEVICE" = cuda ] && $PY -c "import torch; print('#', torch.cuda.get_device_name(), 'x', torch.cuda.device_count(), '| torch', torch.__version__)"
  echo "# $gpus GPU(s), $lanes lane(s) ($([ $paired = 1 ] && echo 'sweep and optimize at once, one GPU each' || echo 'sweep, optimize, re-time in turn')); about $per_pair s a pair; budget $TOTAL s"
} | tee "$LINES"

HARD=$((TOTAL + 45))
within() {  # seconds: that many, or fewer so that nothing runs past the step's hard end
  local left=$((HARD - (SECONDS - start)))
  [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"
}

run_one() {  # name gpu command...: one run, killed at $limit; its exit code in $D/name.rc
  local name=$1 gpu=$2
  shift 2
  local t0=$SECONDS dev=(--device "$DEVICE")
  [ "$DEVICE" = cuda ] && dev+=(--gpus 0)
  CUDA_VISIBLE_DEVICES=$gpu timeout "$(within "$limit")" "$@" --out "$D/$name" "${dev[@]}" --minutes "$MIN" --seed "$SEED" \
    --no-progress > "$D/$name.log" 2>&1
  echo $? > "$D/$name.rc"
  echo "  $name: exit $(cat "$D/$name.rc") in $((SECONDS - t0)) s on GPU $gpu: $(tail -n 1 "$D/$name.log")"
}

one_pair() {  # pair lane
  local pair=$1 lane=$2 target=${1%%:*} op=${1#*:}
  local tag="${target}-${op/@/.}" co g0 g1
  co=$(checkout_for "$target")
  g0=$((paired ? 2 * lane : 0))
  g1=$((paired ? 2 * lane + 1 : 0))
  local sweep=($PY -m kernelsmith sweep "$target" "$op" --checkout "$co")
  local opt=($PY -m kernelsmith optimize "$target" "$op" --checkout "$co")
  [ -n "${SVS_MUTATOR:-}" ] && opt+=(--mutator "$SVS_MUTATOR")
  if [ "$paired" = 1 ]; then
    run_one "$tag-sweep" "$g0" "${sweep[@]}" &
    run_one "$tag-optimize" "$g1" "${opt[@]}" &
    wait
  else
    run_one "$tag-sweep" "$g0" "${sweep[@]}"
    run_one "$tag-optimize" "$g1" "${opt[@]}"
  fi
  local t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$g0 timeout "$(within 300)" $PY dev/gpu/retime.py "$target" "$op" --checkout "$co" \
    --device "$DEVICE" --run "sweep=$D/$tag-sweep" --run "optimize=$D/$tag-optimize" \
    --seconds "$RETIME_S" --json "$D/$tag-retime.json" > "$D/$tag-retime.log" 2>&1
  echo "  $tag-retime: exit $? in $((SECONDS - t0)) s: $(tail -n 1 "$D/$tag-retime.log")"
  $PY dev/gpu/svs_line.py "$pair" "$D/$tag-sweep" "$D/$tag-optimize" "$D/$tag-retime.json" "$MIN" \
    --json "$OUT/svs-lines.jsonl" | tee -a "$LINES"
}

lane() {  # lane index: its pairs in turn, each after the first only if it fits the budget
  local l=$1 i
  for ((i = l; i < ${#pairs[@]}; i += lanes)); do
    # A lane's first pair always starts (the set-up's seconds would otherwise turn away a pair
    # estimated just under the budget, and the call with it); whatever runs is killed at the limit.
    if [ "$i" -ge "$lanes" ] && [ $((SECONDS - start + per_pair)) -gt "$TOTAL" ]; then
      echo "${pairs[$i]}" >> "$D/left.$l"
      continue
    fi
    echo "[$((SECONDS - start)) s] lane $l: ${pairs[$i]}"
    one_pair "${pairs[$i]}" "$l"
  done
}

for ((l = 0; l < lanes; l++)); do
  lane "$l" &
done
wait

status=0
for rc in "$D"/*.rc; do
  [ -f "$rc" ] && [ "$(cat "$rc")" -gt 1 ] && { echo "# FAILED: $(basename "$rc" .rc) exited $(cat "$rc")" | tee -a "$LINES"; status=1; }
done
left=$(cat "$D"/left.* 2>/dev/null | tr '\n' ' ')
echo "# total $((SECONDS - start)) s" | tee -a "$LINES"
if [ -n "$left" ]; then
  echo "# not started (out of time): next call: bash dev/gpu/search_vs_sweep.sh $left" | tee -a "$LINES"
fi
tar czf "$OUT/svs.tgz" -C "$OUT" svs && rm -rf "$D"
exit $status
