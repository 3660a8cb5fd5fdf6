#!/usr/bin/env bash
# Sets up .venv and runs the CPU test suite (GPU tests are skipped without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check kernelsmith bot tests targets scripts
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
