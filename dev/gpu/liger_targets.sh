#!/usr/bin/env bash
# Liger-Kernel's operators (targets/liger.yaml) on the GPU: for each, `evaluate` (the base, timed,
# with its roofline share per shape), `sweep` and `optimize` (LIGER_MINUTES each, default 0.3;
# optimize's LIGER_MUTATOR, default params) and `verify` of the optimize run's winner, else the
# sweep's (Liger's own tests on base and winner); LIGER_PHASES=search skips the evaluations. Prints one line
# per step as it ends, then a table per operator. Runs from the tree (no pip there):
#   bash dev/gpu/liger_targets.sh
# Needs, carried in: .carry/liger (bash dev/gpu/carry_liger.sh here) and .carry/wheels (Optuna, for
# the params mutator: bash dev/gpu/carry_wheels.sh), i.e. carry=[".carry/liger", ".carry/wheels"].
# LIGER_OPS: the operators (default: all in the yaml); LIGER_GPUS: one lane per listed GPU, the
# operators dealt round-robin (default: every visible GPU); LIGER_BUDGET_S: no step starts after this
# many seconds (default 320), so the whole stays under 6 minutes of GPU time; the steps left out are
# listed (never wrap it in an outer `timeout`: that kills the script, not the step it runs). All
# evaluations come first, then sweep, optimize and verify operator by operator; the run folders end
# in $OUT/liger/runs.tgz.
# Liger's tests import transformers and tokenizers (test/utils.py): without them verify says
# could-not-run; the environment line says whether they are there.
set -uo pipefail
cd "$(dirname "$0")/../.."
. dev/gpu/gpu_lib.sh
fresh_out liger
tree_env
CO=${LIGER_CHECKOUT:-$PWD/.carry/liger}
BUDGET_S=${LIGER_BUDGET_S:-320}
MINUTES=${LIGER_MINUTES:-0.3}          # --minutes of each sweep and optimize
MUTATOR=${LIGER_MUTATOR:-params}       # optimize's --mutator
PHASES=${LIGER_PHASES:-"evaluate search"}  # "search" alone skips the timed evaluations
KS="python3 -m kernelsmith"
START=$SECONDS
if [ ! -d "$CO/src/liger_kernel/ops" ]; then
  echo "liger: no checkout at $CO (bash dev/gpu/carry_liger.sh, then carry .carry/liger)" | tee "$D/summary.txt"
  exit 2
fi
python3 - <<'PY' | tee "$D/env.txt"
import importlib.util, platform, torch, triton
have = {m: importlib.util.find_spec(m) is not None for m in ("optuna", "transformers", "tokenizers")}
print("python", platform.python_version(), "torch", torch.__version__, "triton", triton.__version__,
      "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
      "|", ", ".join(f"{m} {'yes' if ok else 'MISSING'}" for m, ok in have.items()))
PY
OPS=${LIGER_OPS:-$(python3 -c "from kernelsmith.onboard.config import load_target
print(' '.join(o.name for o in load_target('targets/liger.yaml').operators))")}
read -r -a LANES <<< "${LIGER_GPUS:-$(python3 -c "import torch; print(*range(torch.cuda.device_count()))")}"
[ "${#LANES[@]}" -gt 0 ] || LANES=(0)

step() {  # name limit_s command...: runs it unless the budget is spent (stdout to NAME.out, stderr
  # to NAME.log); one line when it ends
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  if [ $((SECONDS - START)) -ge "$BUDGET_S" ]; then
    echo "$name: not run (budget of $BUDGET_S s spent)" | tee -a "$D/summary.txt"
    return
  fi
  timeout "$limit" "$@" > "$D/$name.out" 2> "$D/$name.log"
  echo "$name: exit $? in $((SECONDS - t0)) s (GPU ${CUDA_VISIBLE_DEVICES:-all})" | tee -a "$D/summary.txt"
}

lane() {  # phase lane-index: this lane's share of the operators
  local phase=$1 li=$2 i=0 op
  for op in $OPS; do
    if [ $((i % ${#LANES[@]})) -eq "$li" ]; then
      if [ "$phase" = evaluate ]; then
        step "$op-evaluate" 150 $KS evaluate liger "$op" --checkout "$CO" --device cuda --json
      else
        step "$op-sweep" $((${MINUTES%.*} * 60 + 120)) $KS sweep liger "$op" --checkout "$CO" --device cuda --minutes "$MINUTES" \
          --out "$D/runs/$op-sweep" --no-progress
        step "$op-optimize" $((${MINUTES%.*} * 60 + 120)) $KS optimize liger "$op" --checkout "$CO" --device cuda --minutes "$MINUTES" \
          --mutator "$MUTATOR" --out "$D/runs/$op-optimize" --no-progress
        # verify the optimize run's winner, else the sweep's (Liger's own tests on base and winner)
        for kind in optimize sweep; do
          if [ -f "$D/runs/$op-$kind/run.json" ] && python3 -c "import json,sys
sys.exit(0 if json.load(open('$D/runs/$op-$kind/result.json')).get('winner') else 1)" 2>/dev/null; then
            step "$op-verify" 240 $KS verify "$D/runs/$op-$kind" --timeout 200 --json
            break
          fi
        done
      fi
    fi
    i=$((i + 1))
  done
}

for phase in $PHASES; do
  for li in "${!LANES[@]}"; do
    CUDA_VISIBLE_DEVICES=${LANES[$li]} lane "$phase" "$li" &
  done
  wait
done
echo "total: $((SECONDS - START)) s on ${#LANES[@]} GPU(s)" | tee -a "$D/summary.txt"

# One table: the base (accepted, time and roofline share per shape), the sweep's and the search's
# best geomean speedup, verify's status.
python3 - "$D" "$OPS" <<'PY' | tee -a "$D/summary.txt"
import json, sys
from pathlib import Path

d, ops = Path(sys.argv[1]), sys.argv[2].split()


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


for op in ops:
    base = load(d / f"{op}-evaluate.out")
    if base is None:
        print(f"{op}: no base verdict (see {op}-evaluate.log)")
    else:
        shapes = "; ".join(
            f"{','.join(f'{k}={v}' for k, v in s['shape'].items())}: {s.get('baseline_ms') or 0:.4f} ms "
            f"{s.get('pct_roofline') or 0:.0f}% roofline" for s in base.get("shapes") or [])
        state = "ACCEPTED" if base.get("accepted") else f"REJECTED {base.get('reason')}"
        print(f"{op}: base {state} | {shapes}")
    for kind in ("sweep", "optimize"):
        res = load(d / "runs" / f"{op}-{kind}" / "result.json")
        if res is not None:
            print(f"  {kind}: geomean {res.get('geomean_speedup')} CI {res.get('geomean_ci95')} evaluations "
                  f"{res.get('evaluations')} stop: {res.get('stop_reason') or res.get('no_winner_reason')}")
    for kind in ("optimize", "sweep"):
        ver = load(d / "runs" / f"{op}-{kind}" / "verify.json")
        if ver is not None:
            print(f"  verify ({kind}): {ver.get('status')} - {ver.get('reason')}")
PY
# The run folders as one archive (the device tool does not return nested folders).
if [ -d "$D/runs" ]; then
  tar czf "$D/runs.tgz" -C "$D" runs && rm -rf "$D/runs"
fi
