#!/usr/bin/env bash
# Sets up .venv and runs the CPU test suite (GPU tests are skipped without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check kernelsmith bot tests targets scripts dev
# The LMDeploy, SGLang and Liger-Kernel sources the real-target tests read, from their pinned releases
# (cached).
bash scripts/release_checkouts.sh
# Three test processes (pytest-xdist) on CI's 2 cores: much of the suite waits on sandboxed
# subprocesses (workers, compile children, killed-and-resumed runs), so a third process fills the idle
# core time; TEST_PROCESSES overrides.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_PROCESSES:-3}" "$@"
