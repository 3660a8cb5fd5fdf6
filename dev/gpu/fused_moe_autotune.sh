#!/usr/bin/env bash
# Liger-Kernel's fused_moe on the GPU: its two grouped GEMMs and its gather-sum are @triton.autotune'd
# (32, 32 and 40 configs). The base is tuned once per run, in the first worker's oracle, and every
# runner and later worker is handed its choices (kernelsmith/referee/proc/autotune_share.py).
#   bash dev/gpu/fused_moe_autotune.sh        # carry=[".carry/liger", ".carry/wheels"]
# Needs, carried in: .carry/liger (bash dev/gpu/carry_liger.sh here) and .carry/wheels (Optuna, for
# the params mutator: bash dev/gpu/carry_wheels.sh).
# 1. `evaluate liger fused_moe --json` (the base against itself, timed) under `timeout`: its wall
#    time, the verdict, and details.autotune: every choice "shared" (the runner tuned none of the
#    base's kernels), one key per kernel and distinct (hidden, inter) or (hidden, top_k) of the listed
#    and fresh shapes.
# 2. `optimize --mutator params --minutes FMA_MINUTES` (default 0.5) in the time left: result.json's
#    evaluator[].autotune ({kernels, given, tuned} of the last worker's oracle; "tuned" > 0 only where
#    that worker was the run's first) and boot_phases.base_compile (where the run's one tuning is),
#    and, over the archive's verdicts, how many choices runners were given and how many they tuned.
# Everything within FMA_BUDGET_S (default 290 s); results in $OUT/fused_moe_autotune.tgz (the
# archive.sqlite left out).
set -uo pipefail
cd "$(dirname "$0")/../.."
. dev/gpu/gpu_lib.sh
fresh_out fused_moe_autotune
tree_env
CO=${LIGER_CHECKOUT:-$PWD/.carry/liger}
BUDGET_S=${FMA_BUDGET_S:-290}
EVAL_S=${FMA_EVAL_S:-200}      # evaluate's `timeout`
MINUTES=${FMA_MINUTES:-0.5}    # optimize's --minutes
DEVICE=${FMA_DEVICE:-cuda}     # interpret: a dry run of this script on a CPU machine
KS="python3 -m kernelsmith"
START=$SECONDS
if [ ! -d "$CO/src/liger_kernel/ops" ]; then
  echo "fused_moe: no checkout at $CO (bash dev/gpu/carry_liger.sh, then carry .carry/liger)"
  exit 2
fi
python3 -c "import platform, torch, triton
print('python', platform.python_version(), 'torch', torch.__version__, 'triton', triton.__version__,
      'device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')" | tee "$D/env.txt"

t0=$SECONDS
timeout "$EVAL_S" $KS evaluate liger fused_moe --checkout "$CO" --device "$DEVICE" --json \
  > "$D/evaluate.json" 2> "$D/evaluate.log"
echo "evaluate: exit $? in $((SECONDS - t0)) s (timeout $EVAL_S s)" | tee "$D/summary.txt"

LEFT=$((BUDGET_S - (SECONDS - START)))
if [ "$LEFT" -ge 60 ]; then
  t0=$SECONDS
  timeout "$LEFT" $KS optimize liger fused_moe --checkout "$CO" --device "$DEVICE" --minutes "$MINUTES" \
    --mutator params --out "$D/run" --no-progress > "$D/optimize.out" 2> "$D/optimize.log"
  echo "optimize --minutes $MINUTES: exit $? in $((SECONDS - t0)) s (timeout $LEFT s)" | tee -a "$D/summary.txt"
else
  echo "optimize: not run ($LEFT s of the budget left)" | tee -a "$D/summary.txt"
fi

python3 - "$D" <<'PY' | tee -a "$D/summary.txt"
import collections, json, sqlite3, sys
from pathlib import Path

d = Path(sys.argv[1])


def sources(autotune):
    """(shared, tuned) choices of the base's kernels and of candidates' own, in one details.autotune."""
    n = collections.Counter()
    for kernel, keys in (autotune or {}).items():
        own = kernel.endswith("(candidate)")
        for choice in keys.values():
            n[(own, choice["source"])] += 1
    return n


try:
    v = json.loads((d / "evaluate.json").read_text())
except (OSError, ValueError):
    v = None
    print("evaluate: no verdict (killed?); last lines of its stderr:")
    print("\n".join((d / "evaluate.log").read_text(errors="replace").splitlines()[-15:]))
if v is not None:
    det = v.get("details") or {}
    print(f"base: {'ACCEPTED' if v.get('accepted') else 'REJECTED ' + str(v.get('reason'))} in "
          f"{v.get('eval_s')} s; geomean {v.get('geomean_speedup')}; A/A {(v.get('timing') or {}).get('aa_ratio')}")
    print(f"  phase_s {det.get('phase_s')}")
    for s in v.get("shapes") or []:
        print(f"  {s.get('shape')}: base {s.get('baseline_ms')} ms, {s.get('pct_roofline')}% roofline, "
              f"A/A {s.get('aa_ratio')}")
    print(f"  fresh shapes: {v.get('fresh_shapes')}")
    for kernel, keys in (det.get("autotune") or {}).items():
        print(f"  autotune {kernel}:")
        for key, c in keys.items():
            print(f"    {key}: {c['source']}: {c['config']}")
    print(f"  choices (candidate's own, source): {dict(sources(det.get('autotune')))}")

run = d / "run"
try:
    res = json.loads((run / "result.json").read_text())
except (OSError, ValueError):
    res = None
    if (d / "optimize.log").exists():
        print("optimize: no result.json; last lines of its stderr:")
        print("\n".join((d / "optimize.log").read_text(errors="replace").splitlines()[-15:]))
if res is not None:
    print(f"optimize: evaluations {res.get('evaluations')}, winner geomean {res.get('geomean_speedup')}, "
          f"wall {res.get('wall_s')} s, stop {res.get('stop_reason') or res.get('no_winner_reason')}")
    for ev in res.get("evaluator") or []:
        print(f"  gpu {ev.get('gpu')}: autotune {ev.get('autotune')}, boot_s {ev.get('boot_s')}, "
              f"first_candidate_s {ev.get('first_candidate_s')}, boot_phases {ev.get('boot_phases')}")
db = run / "archive.sqlite"
if db.exists():
    total, rows = collections.Counter(), 0
    for (verdict,) in sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("select verdict from candidates"):
        total += sources((json.loads(verdict or "{}").get("details") or {}).get("autotune"))
        rows += 1
    print(f"  {rows} verdicts; choices runners ran with (candidate's own, source): {dict(total)}")
PY

find "$D" -name 'archive.sqlite*' -delete
tar czf /tmp/fused_moe_autotune.tgz -C "$OUT" fused_moe_autotune && rm -rf "$D" \
  && mv /tmp/fused_moe_autotune.tgz "$OUT/fused_moe_autotune.tgz"
echo "total: $((SECONDS - START)) s"
