#!/usr/bin/env bash
# Sets up .venv and runs the CPU test suite (GPU tests are skipped without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check kernelsmith bot tests targets scripts dev
# The LMDeploy, SGLang and Liger-Kernel sources the real-target tests read, from their pinned releases
# (cached).
bash scripts/release_checkouts.sh
# Three test processes (pytest-xdist): the suite is mostly waiting on subprocesses and the Triton
# interpreter, and each torch process runs one OpenMP thread (tests/conftest.py), so a third process
# fills the waits (2 cores: 787 s, against 913 s with two). Whole files per process (`--dist
# loadfile`): a module's fixtures (a Ray cluster, shared Referees, finished runs) are made once, not
# once per process.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TEST_PROCESSES:-3}" --dist loadfile "$@"
