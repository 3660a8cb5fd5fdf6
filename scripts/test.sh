#!/usr/bin/env bash
# Sets up .venv and runs the CPU test suite (GPU tests are skipped without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check kernelsmith bot tests targets scripts dev
# The LMDeploy, SGLang and Liger-Kernel sources the real-target tests read, from their pinned releases
# (cached).
bash scripts/release_checkouts.sh
# Two test processes (pytest-xdist): the suite is mostly waiting on subprocesses and the Triton
# interpreter, and ran 730-900 s serially on CI's 2 cores against its 15 minutes.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_PROCESSES:-2}" "$@"
