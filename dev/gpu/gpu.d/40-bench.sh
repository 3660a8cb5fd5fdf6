#!/usr/bin/env bash
# KernelBench: score the shipped problems' hand-written Triton solutions on the GPU with
# KernelBench's metrics (correctness rate, fast_1.0, fast_1.2, geomean speedup over PyTorch eager).
# Writes $OUT/bench/kernelbench.md (the table) and $OUT/bench/kernelbench.json (per task, per shape).
set -uo pipefail
cd "$(dirname "$0")/../../.."
out="${OUT:-$PWD/gpu-out}/bench"
mkdir -p "$out"
problems=kernelsmith/kernelbench/problems
python3 -m kernelsmith bench "$problems" --solutions "$problems/solutions" --device cuda \
  --save "$out/kernelbench.json" | tee "$out/kernelbench.md"
exit "${PIPESTATUS[0]}"
