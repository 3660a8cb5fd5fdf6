# Shared by the dev/gpu scripts and the gpu.d steps (sourced, never run as a step: gpu_check.sh runs
# gpu.d/*.sh). Functions only: sourcing it changes nothing.

# The environment kernelsmith runs with from the tree (no pip on the GPU machine), from the repository
# root: the tree first on PYTHONPATH, then the wheels carried in .carry/wheels (Optuna) where they are,
# the tree's targets, unbuffered output, and /tmp/kernelsmith-cache unless KERNELSMITH_CACHE is set.
tree_env() {
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  if [ -d "$PWD/.carry/wheels" ]; then
    export PYTHONPATH="$PYTHONPATH:$PWD/.carry/wheels"
  fi
  export KERNELSMITH_TARGETS="$PWD/targets" PYTHONUNBUFFERED=1
  export KERNELSMITH_CACHE=${KERNELSMITH_CACHE:-/tmp/kernelsmith-cache}
}

# A fresh results folder $OUT/NAME (OUT: the device's collected folder, else ./gpu-out), set as $D.
fresh_out() {
  OUT=${OUT:-$PWD/gpu-out}
  D="$OUT/$1"
  rm -rf "$D"
  mkdir -p "$D"
}

# The checkout folder for a target name: LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT (carried in), the bundled
# demo's from the tree (run from the repository root); empty when unknown or unset.
checkout_for() {
  case "$1" in
    lmdeploy) echo "${LMDEPLOY_CHECKOUT:-}" ;;
    sglang) echo "${SGLANG_CHECKOUT:-}" ;;
    demo) echo "$PWD/examples/miniserve" ;;
  esac
}
