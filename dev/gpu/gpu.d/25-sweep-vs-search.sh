#!/usr/bin/env bash
# GPU step (issue 11 "Show"): `kernelsmith sweep` and `kernelsmith optimize --mutator params` side by
# side on real operators, from checkout folders carried in, then
# `python -m kernelsmith.search.compare SWEEP PARAMS` per operator, also with `--reference final`
# (GPU-seconds to 50/90/95% of the sweep's per-shape-best geomean, final geomean, evaluations,
# evaluations per held GPU-minute, best speedup by GPU-seconds). Results under $OUT/sweep-vs-search/.
#   LMDEPLOY_CHECKOUT=/path SGLANG_CHECKOUT=/path bash dev/gpu/gpu.d/25-sweep-vs-search.sh
# SVS_OPS: target:operator pairs (default below); an operator whose checkout variable is unset is
#   skipped, saying so.
# Scheduling: with two or more GPUs, each operator's sweep and search run at once, one GPU each
#   (a lane is a pair of GPUs; operators are dealt round-robin over the lanes); with one GPU, one
#   after the other on it.
# SVS_MINUTES: each run's --minutes. Default: what fits the whole step into SVS_TOTAL_S (default 540 s,
#   one 10-minute device command with room for the start) given the rounds the lanes need and
#   SVS_OVERHEAD_S (default 60 s per run: start, base calibration, final re-measurement), in steps of
#   0.25 min. 5 operators: 1 GPU 0.25 min (too short to mean much: use SVS_OPS for fewer operators),
#   2 GPUs 0.75 min, 4 GPUs 2 min, 8 GPUs 3.5 min; one operator on 2 GPUs 8 min.
# SVS_DIR: the results folder under $OUT (default sweep-vs-search; another name keeps an earlier
#   invocation's results, e.g. operators with different SVS_MINUTES in one device call).
# SVS_KINDS: "sweep params" (default), or one of them: e.g. more search seeds against a complete sweep
#   measured earlier (its run directory then goes to `python -m kernelsmith.search.compare` by hand).
# SVS_SEEDS: the --seed of each pair of runs (default "0"). With more than one, every operator runs
#   once per seed (run names end in -s<seed>) and seeds.md tabulates GPU-seconds to 95% per seed and
#   their medians: on a space of a few distinct launches one pair of runs is an order's luck.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
D="$OUT/${SVS_DIR:-sweep-vs-search}"
rm -rf "$D"
mkdir -p "$D"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export KERNELSMITH_TARGETS="$PWD/targets"
KS="python3 -m kernelsmith"
OPS=${SVS_OPS:-"lmdeploy:multinomial_sampling lmdeploy:fused_single_group_router lmdeploy:rms_norm sglang:gelu_and_mul sglang:fused_rmsnorm"}
TOTAL=${SVS_TOTAL_S:-540}
OVERHEAD=${SVS_OVERHEAD_S:-60}
SEEDS=${SVS_SEEDS:-0}
KINDS=${SVS_KINDS:-"sweep params"}
SUMMARY="$D/summary.md"
status=0
start=$SECONDS

. dev/gpu/gpu_lib.sh  # checkout_for

todo=()
for pair in $OPS; do
  target=${pair%%:*}
  co=$(checkout_for "$target")
  if [ -z "$co" ] || [ ! -d "$co" ]; then
    echo "25-sweep-vs-search: ${target^^}_CHECKOUT not set or missing: skipping $pair" | tee -a "$SUMMARY"
    continue
  fi
  for seed in $SEEDS; do
    todo+=("$pair@$seed")
  done
done
[ "${#todo[@]}" -gt 0 ] || { echo "25-sweep-vs-search: no operator to run"; exit 0; }

gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$gpus" -ge 1 ] || { echo "25-sweep-vs-search: no CUDA device"; exit 1; }
lanes=$((gpus / 2))
paired=1
[ "$lanes" -ge 1 ] || { lanes=1; paired=0; }
rounds=$(((${#todo[@]} + lanes - 1) / lanes))
runs_per_round=$((paired ? 1 : $(echo $KINDS | wc -w)))  # runs one after the other in a lane per operator
MIN=${SVS_MINUTES:-$(python3 -c "
import math, sys
total, overhead, rounds, serial = map(float, sys.argv[1:])
per_run = total / rounds / serial - overhead
print(max(0.25, math.floor(per_run / 60 * 4) / 4))" "$TOTAL" "$OVERHEAD" "$rounds" "$runs_per_round")}
# A run is killed after its minutes plus twice the overhead, and never runs past the step's total.
LIMIT=$(python3 -c "import sys; m, o, t = map(float, sys.argv[1:]); print(int(min(m * 60 + 2 * o, t + 20)))" \
  "$MIN" "$OVERHEAD" "$TOTAL")
EXPECT=$(python3 -c "import sys; print(int(float(sys.argv[1]) * 60 + float(sys.argv[2])))" "$MIN" "$OVERHEAD")
{
  echo "# sweep vs optimize --mutator params ($(date -u +%FT%TZ))"
  echo
  echo "GPUs: $gpus; lanes: $lanes ($([ $paired = 1 ] && echo 'sweep and search at once, one GPU each' || echo 'one GPU: sweep, then search')); operators: ${todo[*]}; --minutes $MIN per run (kill after $LIMIT s)"
} >> "$SUMMARY"
tail -n 1 "$SUMMARY"

one() {  # name gpu command... : one run on one GPU, its exit code in $D/name.rc
  local name=$1 gpu=$2
  shift 2
  local t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$gpu timeout "$LIMIT" "$@" --out "$D/$name" --device cuda --gpus 0 \
    --minutes "$MIN" --no-progress > "$D/$name.log" 2>&1
  local rc=$?
  echo "$rc" > "$D/$name.rc"
  echo "$name: exit $rc in $((SECONDS - t0)) s on GPU $gpu ($(tail -n 1 "$D/$name.log"))"
}

tag_of() {  # target:op@seed -> the runs' name prefix
  local pair=${1%@*} seed=${1##*@}
  local tag="${pair%%:*}-${pair#*:}"
  [ "$(echo $SEEDS | wc -w)" -gt 1 ] && tag="$tag-s$seed"
  echo "$tag"
}

operator() {  # target:op@seed lane
  local pair=${1%@*} seed=${1##*@} lane=$2 co g0 g1 tag
  local target=${pair%%:*} op=${pair#*:}
  tag=$(tag_of "$1")
  co=$(checkout_for "$target")
  g0=$((paired ? 2 * lane : 0))
  g1=$((paired ? 2 * lane + 1 : 0))
  local sweep=(${KS} sweep "$target" "$op" --checkout "$co" --seed "$seed")
  local search=(${KS} optimize "$target" "$op" --checkout "$co" --mutator params --seed "$seed")
  [ -n "${SVS_STAGNATION:-}" ] && search+=(--stagnation "$SVS_STAGNATION")
  if [ "$paired" = 1 ] && [ "$KINDS" = "sweep params" ]; then
    one "$tag-sweep" "$g0" "${sweep[@]}" &
    one "$tag-params" "$g1" "${search[@]}" &
    wait
  else
    case " $KINDS " in *" sweep "*) one "$tag-sweep" "$g0" "${sweep[@]}" ;; esac
    case " $KINDS " in *" params "*) one "$tag-params" "$g1" "${search[@]}" ;; esac
  fi
  local runs=()
  for kind in $KINDS; do
    [ -f "$D/$tag-$kind/result.json" ] && runs+=("$D/$tag-$kind")
    [ "$(cat "$D/$tag-$kind.rc" 2>/dev/null)" -le 1 ] 2>/dev/null || echo "FAILED" > "$D/$tag.failed"
  done
  if [ "${#runs[@]}" -gt 0 ]; then
    python3 -m kernelsmith.search.compare "${runs[@]}" > "$D/$tag-compare.md" 2>&1 \
      || echo "FAILED" > "$D/$tag.failed"
    python3 -m kernelsmith.search.compare "${runs[@]}" --json > "$D/$tag-compare.json" 2>/dev/null
    # The same against the sweep's winner re-measured on new inputs (where there is one): the best
    # of many noisy screens runs high on kernels with a few percent of headroom.
    python3 -m kernelsmith.search.compare "${runs[@]}" --reference final > "$D/$tag-compare-final.md" \
      2>/dev/null || rm -f "$D/$tag-compare-final.md"
  fi
}

for ((r = 0; r < rounds; r++)); do
  if [ $((SECONDS - start + EXPECT * runs_per_round)) -gt "$((TOTAL + 30))" ]; then
    echo "25-sweep-vs-search: out of time; skipping round $((r + 1)) of $rounds" | tee -a "$SUMMARY"
    break
  fi
  for ((l = 0; l < lanes; l++)); do
    i=$((r * lanes + l))
    [ "$i" -lt "${#todo[@]}" ] && operator "${todo[$i]}" "$l" &
  done
  wait
done

for entry in "${todo[@]}"; do
  tag=$(tag_of "$entry")
  [ -f "$D/$tag.failed" ] && status=1
  [ -f "$D/$tag-compare.md" ] || continue
  { echo; echo "## $tag (seed ${entry##*@})"; echo; cat "$D/$tag-compare.md"; } >> "$SUMMARY"
  if [ -f "$D/$tag-compare-final.md" ]; then
    { echo; echo "Against the sweep's re-measured winner:"; echo; sed -n '1,/^$/p;/^| run /,/^$/p' \
      "$D/$tag-compare-final.md"; } >> "$SUMMARY"
  fi
  for kind in sweep params; do
    python3 - "$D/$tag-$kind/result.json" "$kind" >> "$SUMMARY" 2>/dev/null <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("sweep") or {}
extra = (f"; grid {s['evaluated']}/{s['grid_size']} evaluated ({s.get('distinct_launches')} distinct launches), "
         f"best single {s['best_single_geomean']:.3f}x, "
         f"per shape {s['per_shape_best_geomean']:.3f}x, table pays: {s['per_shape_table_beats_single']}"
         + (f", table measured: #{s['table_id']} {s.get('table_geomean') or 'lost at the screen'}"
            if s.get("table_id") is not None else "")) if s else ""
g, ci = r.get("geomean_speedup"), r.get("geomean_ci95")
won = f"winner {g:.3f}x, 95% CI {ci}" if g else f"no winner: {r.get('no_winner_reason')}"
print(f"\n- {sys.argv[2]}: {won}{extra}")
PY
  done
done
if [ "$(echo $SEEDS | wc -w)" -gt 1 ]; then
  # Per operator and seed: GPU-seconds to 95% of that seed's sweep reference; medians over seeds
  # ("never" counts as slower than any number).
  python3 - "$D" > "$D/seeds.md" <<'PY'
import json, math, statistics, sys
from collections import defaultdict
from pathlib import Path

by_op = defaultdict(dict)
for f in sorted(Path(sys.argv[1]).glob("*-s*-compare.json")):
    op, seed = f.name[: -len("-compare.json")].rsplit("-s", 1)
    runs = {r["kind"].split()[0]: r for r in json.loads(f.read_text())["runs"]}
    row = {k: (runs[k]["gpu_s_to"] or {}).get("95%") for k in ("sweep", "optimize") if k in runs}
    row["total"] = runs["sweep"]["gpu_s"] if "sweep" in runs else None
    row["share"] = runs["optimize"].get("share_of_sweep_gpu_s") if "optimize" in runs else None
    row["within"] = runs["optimize"].get("share_within_ci") if "optimize" in runs else None
    by_op[op][int(seed)] = row
for op, seeds in by_op.items():
    print(f"## {op}: referee GPU-seconds to 95% of each seed's sweep reference\n")
    print("| seed | sweep | params | sweep's GPU-s | params' share of them | within CI (compare.py) |\n"
          "|---:|---:|---:|---:|---:|---:|")
    pct = lambda x: f"{100 * x:.0f}%" if x is not None and math.isfinite(x) else "never"
    for seed, v in sorted(seeds.items()):
        print(f"| {seed} | {v.get('sweep') or 'never'} | {v.get('optimize') or 'never'} | {v.get('total')} "
              f"| {pct(v.get('share'))} | {pct(v.get('within'))} |")
    med = {k: statistics.median([v.get(k) or math.inf for v in seeds.values()])
           for k in ("sweep", "optimize", "share", "within")}
    print(f"| median | {med['sweep']} | {med['optimize']} | | {pct(med['share'])} | {pct(med['within'])} |\n")
PY
  cat "$D/seeds.md" >> "$SUMMARY"
fi
echo "total: $((SECONDS - start)) s" >> "$SUMMARY"
cat "$SUMMARY"
exit $status
