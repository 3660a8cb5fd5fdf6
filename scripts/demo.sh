#!/usr/bin/env bash
# Sets up .venv and runs the main job on the bundled demo target: optimize rms_norm, then verify.
# Without a CUDA device the Triton interpreter checks correctness and integrity only (no timing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
OUT=${OUT_DIR:-runs/demo-rms_norm}
rm -rf "$OUT"
status=0
kernelsmith optimize demo rms_norm --mutator params --budget "${BUDGET:-6}" --out "$OUT" --seed 0 || status=$?
if [ "$status" -eq 0 ]; then
  kernelsmith verify "$OUT" || status=$?
fi
echo "run directory: $OUT (report: $OUT/report.md)"
exit "$status"
