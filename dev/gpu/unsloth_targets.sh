#!/usr/bin/env bash
# Unsloth's operators (targets/unsloth.yaml) on a GPU, one after another: `evaluate`, `sweep` and
# `optimize --mutator all` (UNSLOTH_MINUTES each, default 0.3; UNSLOTH_MUTATOR another mutator) and
# `verify` of the optimize run, each with its exit code, wall time and the numbers that matter
# (accepted, best speedup, winner).
#   bash dev/gpu/unsloth_targets.sh            # every operator; UNSLOTH_OPS="swiglu geglu" for some
# Needs .carry/unsloth: the release checkout `kernelsmith checkout unsloth --from-package` leaves in
# $KERNELSMITH_CACHE/releases/unsloth-unsloth-2026.10.9-<key> (a one-commit git repository: carry its
# .git too, verify makes a worktree of it), and .carry/wheels (optuna). Runs from the tree (PYTHONPATH).
# The yaml has `test: null` (the wheel ships no tests): verify is expected to exit 2, "could-not-run".
# UNSLOTH_BUDGET_S (default 480): no step starts after this many seconds, so the script ends on its
# own (never wrap it in an outer `timeout`: that kills the script, not the step it is running). The
# run folders are tarred into $OUT/unsloth-targets.tgz at the end (the device tool does not return
# nested folders).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
D="$OUT/unsloth-targets"
mkdir -p "$D"
CO="$PWD/.carry/unsloth"
. dev/gpu/gpu_lib.sh
tree_env
OPS=${UNSLOTH_OPS:-"swiglu swiglu_backward geglu geglu_backward geglu_approx geglu_approx_backward"}
MINUTES=${UNSLOTH_MINUTES:-0.3}     # --minutes of each sweep and optimize
MUTATOR=${UNSLOTH_MUTATOR:-all}     # optimize's --mutator
DEVICE=${DEVICE:-cuda}  # DEVICE=interpret tries the script on a machine without a GPU
BUDGET_S=${UNSLOTH_BUDGET_S:-480}
step() {  # name, then the kernelsmith arguments
  local name=$1 t0=$SECONDS
  shift
  if [ "$SECONDS" -ge "$BUDGET_S" ]; then
    echo "$name: not run (budget of $BUDGET_S s spent)"
    return
  fi
  timeout 600 python3 -m kernelsmith "$@" > "$D/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s"
}
summary() {  # a run directory
  python3 - "$1" <<'PY'
import json, sys
from pathlib import Path
try:
    res = json.loads((Path(sys.argv[1]) / "result.json").read_text())
except OSError:
    print("  no result.json"); sys.exit()
sweep = res.get("sweep") or {}
winner = res.get("winner") or {}
print(f"  stop: {res.get('stop_reason')}")
print(f"  evaluations {res.get('evaluations')}, winner {winner.get('id')} at {res.get('geomean_speedup')}"
      + (f"; sweep best single {sweep.get('best_single_geomean')}, grid {sweep.get('grid_size')}" if sweep else ""))
for line in (winner.get("diff") or "").splitlines():  # the change a maintainer would read
    if line[:1] in "+-" and line[:3] not in ("+++", "---"):
        print(f"    {line.strip()}")
PY
}
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo "no GPU: $DEVICE"
for op in $OPS; do
  step "$op-evaluate" evaluate unsloth "$op" --checkout "$CO" --device "$DEVICE" --json
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print('  accepted', v.get('accepted'), '|',
  '; '.join(f\"{s['shape']}: {s.get('baseline_ms') or 0:.4f} ms {s.get('pct_roofline') or 0:.0f}% roofline\"
            for s in v.get('shapes') or []))" "$D/$op-evaluate.log" 2>/dev/null || tail -3 "$D/$op-evaluate.log"
  step "$op-sweep" sweep unsloth "$op" --checkout "$CO" --device "$DEVICE" --minutes "$MINUTES" --seed 0 \
    --out "$D/$op-sweep" --no-progress
  summary "$D/$op-sweep"
  step "$op-optimize" optimize unsloth "$op" --checkout "$CO" --device "$DEVICE" --minutes "$MINUTES" --seed 0 \
    --mutator "$MUTATOR" --out "$D/$op-optimize" --no-progress
  grep -h "^params:" "$D/$op-optimize.log" | sed 's/^/  /'
  summary "$D/$op-optimize"
  step "$op-verify" verify "$D/$op-optimize"
  tail -2 "$D/$op-verify.log" | sed 's/^/  /'
done
tar czf /tmp/unsloth-targets.tgz -C "$OUT" unsloth-targets && mv /tmp/unsloth-targets.tgz "$OUT/" \
  && rm -rf "$D" && echo "results: $OUT/unsloth-targets.tgz"
