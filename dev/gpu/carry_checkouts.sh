#!/usr/bin/env bash
# The real target sources the H200 steps read (dev/gpu/gpu.d/25-sweep-vs-search.sh, 30-targets.sh),
# as read-only copies in the ignored .carry/ folder, small enough for the device tool's 64 MiB:
#   bash dev/gpu/carry_checkouts.sh [LMDEPLOY_GIT_DIR]
# .carry/lmdeploy: `git archive` of LMDeploy at LMDEPLOY_REV (default 1263d5cd, what
#   targets/lmdeploy.yaml was checked against) from a clone or bare mirror at LMDEPLOY_GIT_DIR
#   (skipped, saying so, without one); about 18 MB.
# .carry/sglang: the sglang==$SGLANG_VERSION wheel's `sglang/` package as `python/sglang/` (the
#   repository layout targets/sglang.yaml's `file:` paths use), Python files only, without the
#   serving runtime (srt/: its one import from the kernels is stubbed by the yaml), multimodal_gen/,
#   the benchmarks and the CLI; about 15 MB. Needs pip access to that wheel.
# Then: SGLANG_CHECKOUT=$PWD/.carry/sglang LMDEPLOY_CHECKOUT=$PWD/.carry/lmdeploy, and carry the
# folders (device tool `carry`: [".carry/sglang", ".carry/wheels"], say; see carry_wheels.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
LMDEPLOY_REV=${LMDEPLOY_REV:-1263d5cd889b7ad500e85b8eb20401327a4516ab}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
mkdir -p .carry

if [ -n "${1:-}" ]; then
  rm -rf .carry/lmdeploy
  mkdir -p .carry/lmdeploy
  git --git-dir="$1" archive "$LMDEPLOY_REV" | tar x -C .carry/lmdeploy
  echo ".carry/lmdeploy: LMDeploy $LMDEPLOY_REV ($(du -sh .carry/lmdeploy | cut -f1))"
else
  echo ".carry/lmdeploy: skipped (no LMDEPLOY_GIT_DIR given: a clone or mirror of InternLM/lmdeploy)"
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$TMP" "sglang==$SGLANG_VERSION"
"$PY" -m zipfile -e "$TMP"/sglang-*.whl "$TMP/wheel"
PKG="$TMP/wheel/sglang"
find "$PKG" -type f ! -name "*.py" -delete
find "$PKG" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$PKG"/srt "$PKG"/multimodal_gen "$PKG"/benchmark "$PKG"/lang "$PKG"/api "$PKG"/cli
rm -rf .carry/sglang
mkdir -p .carry/sglang/python
mv "$PKG" .carry/sglang/python/sglang
# Every kernel file the yaml names must be there.
missing=0
for f in $(sed -n 's/^ *file: *//p' targets/sglang.yaml); do
  [ -f ".carry/sglang/$f" ] || { echo "missing: .carry/sglang/$f" >&2; missing=1; }
done
[ "$missing" = 0 ] || exit 1
echo ".carry/sglang: sglang $SGLANG_VERSION sources ($(du -sh .carry/sglang | cut -f1))"
