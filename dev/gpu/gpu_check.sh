#!/usr/bin/env bash
# The one GPU check, run on the H200 through the device tool from the repository root:
#   bash dev/gpu/gpu_check.sh [step-glob]
# Runs `pytest -m gpu`, then every dev/gpu/gpu.d/*.sh step (or those matching the glob) in order.
# Each step writes its results under $OUT (defaults to ./gpu-out here); at the end they are packed
# into $OUT/gpu-check.tgz (the device tool returns 8 files at most). No pip there: the project
# runs from the tree via PYTHONPATH; git, PyGithub and openai may be missing; Optuna comes from
# .carry/wheels (bash dev/gpu/carry_wheels.sh here, then carry=[".carry/wheels"]).
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Optuna (the params mutator's sampler) and its pure-Python deps, unpacked by dev/gpu/carry_wheels.sh
# and sent along with the device tool's `carry`: there is no pip on that machine.
if [ -d "$PWD/.carry/wheels" ]; then
  export PYTHONPATH="$PYTHONPATH:$PWD/.carry/wheels"
fi
export PYTHONUNBUFFERED=1
export KERNELSMITH_CACHE=${KERNELSMITH_CACHE:-/tmp/kernelsmith-cache}
python3 - <<'PY' | tee "$OUT/env.txt"
import torch, triton, platform
print("python", platform.python_version(), "torch", torch.__version__, "triton", triton.__version__)
try:
    import optuna
    print("optuna", optuna.__version__)
except ImportError:
    print("optuna missing: the params mutator will refuse to start (see dev/gpu/carry_wheels.sh)")
print("device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
PY
status=0
glob=${1:-*}
if [ "$glob" = "*" ] || [ "$glob" = "pytest" ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.txt" || status=1
fi
for step in dev/gpu/gpu.d/$glob.sh; do
  [ -f "$step" ] || continue
  echo "=== $step"
  bash "$step" || { echo "step $step failed"; status=1; }
done
# The device tool brings back at most 8 files, at most 2 folders down: everything goes into one
# archive ($OUT/gpu-check.tgz), and only it and the top-level text files stay.
tar czf /tmp/gpu-check.tgz -C "$OUT" . && mv /tmp/gpu-check.tgz "$OUT/gpu-check.tgz" &&
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name gpu-check.tgz ! -name '*.txt' ! -name '*.md' \
    -exec rm -rf {} + && echo "packed: $OUT/gpu-check.tgz (tar xzf it here)"
exit $status
