#!/usr/bin/env bash
# Liger-Kernel's sources for the GPU machine (no network or pip there), as a plain folder in the
# ignored .carry/ (about 5 MB): the liger-kernel==$LIGER_VERSION sdist's Python sources under
# src/liger_kernel/, its upstream tests' Python files (test/, without the convergence tests' data)
# and pyproject.toml (pytest's paths: src/ and .), laid out as the repository, so targets/liger.yaml's
# `file:` paths and `test:` commands work there. A folder without .git: runs name their base by a
# content hash, and `verify` copies it.
#   bash dev/gpu/carry_liger.sh            # then carry=[".carry/liger", ".carry/wheels"]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
LIGER_VERSION=${LIGER_VERSION:-0.8.5}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip download --quiet --no-deps --no-binary=:all: --dest "$TMP" "liger-kernel==$LIGER_VERSION"
tar xzf "$TMP"/liger_kernel-"$LIGER_VERSION".tar.gz -C "$TMP"
SRC="$TMP/liger_kernel-$LIGER_VERSION"
rm -rf .carry/liger
mkdir -p .carry/liger
cp "$SRC/pyproject.toml" .carry/liger/
(cd "$SRC" && find src/liger_kernel test -name '*.py' ! -path 'test/convergence/*' -print0 \
   | tar --null -cf - -T -) | tar -xf - -C .carry/liger
missing=0
for f in $(sed -n 's/^ *file: *//p' targets/liger.yaml); do
  [ -f ".carry/liger/$f" ] || { echo "missing: .carry/liger/$f" >&2; missing=1; }
done
for t in $(sed -n 's/^ *test: .* \(test\/[^ ]*\.py\)$/\1/p' targets/liger.yaml); do
  [ -f ".carry/liger/$t" ] || { echo "missing: .carry/liger/$t" >&2; missing=1; }
done
[ "$missing" = 0 ] || exit 1
echo ".carry/liger: liger-kernel $LIGER_VERSION sources and tests ($(du -sh .carry/liger | cut -f1))"
