#!/usr/bin/env bash
# The real-target tests' upstream sources: `kernelsmith checkout NAME --from-package` for every
# target yaml with a `package:` field (a one-commit repository of the release's files, cached in the
# kernelsmith cache; later runs find it there and download nothing). tests/upstreamkit.py finds them.
# Without them those tests skip; a failure here (no network) is a warning, and an error when
# KERNELSMITH_REQUIRE_RELEASES=1 (CI, .ci/run).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
failed=""
for yaml in targets/*.yaml; do
  grep -q '^package:' "$yaml" || continue
  name=$(basename "$yaml" .yaml)
  "$PY" -m kernelsmith checkout "$name" --from-package || failed="$failed $name"
done
if [ -n "$failed" ]; then
  echo "release checkouts failed for:$failed (their real-target tests will skip)" >&2
  [ "${KERNELSMITH_REQUIRE_RELEASES:-0}" = 1 ] && exit 1
fi
exit 0
