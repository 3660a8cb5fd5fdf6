# Shared by the dev/gpu/gpu.d steps (sourced, never run as a step: gpu_check.sh runs gpu.d/*.sh).

# The checkout folder for a target name: LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT (carried in), the bundled
# demo's from the tree (run from the repository root); empty when unknown or unset.
checkout_for() {
  case "$1" in
    lmdeploy) echo "${LMDEPLOY_CHECKOUT:-}" ;;
    sglang) echo "${SGLANG_CHECKOUT:-}" ;;
    demo) echo "$PWD/examples/miniserve" ;;
  esac
}
