#!/usr/bin/env bash
# Optuna for a machine without pip (the H200): downloads the wheels of optuna and of what
# `import optuna` and the params mutator's in-memory TPE study need, for Python 3.12 on manylinux
# x86_64, and unpacks them into one folder that works on PYTHONPATH:
#   bash dev/gpu/carry_wheels.sh [DEST]          # DEST defaults to .carry/wheels (gitignored)
#   PYTHONPATH=.carry/wheels python3 -c "import optuna"
# dev/gpu/gpu_check.sh puts .carry/wheels on PYTHONPATH when it is there; pass it to the device
# tool's `carry`. numpy comes with torch there. sqlalchemy, alembic, Mako and PyYAML are declared by
# optuna but used only by its RDB/journal storages and CLI: they are left out (an in-memory study
# never imports them), which a check at the end proves by importing with only DEST and the stdlib.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.carry/wheels}
PY=${PYTHON:-python3}
# What `import optuna` imports beyond numpy (checked with optuna 4.x and 5.0).
PACKAGES=("optuna>=4.0,<6" "colorlog" "tqdm" "packaging")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform any --implementation py --dest "$TMP" "${PACKAGES[@]}"
rm -rf "$DEST"
mkdir -p "$DEST"
for whl in "$TMP"/*.whl; do
  "$PY" -m zipfile -e "$whl" "$DEST"  # a wheel is a zip whose root is site-packages
done
echo "unpacked into $DEST:"
ls "$TMP"
# Prove the folder suffices: optuna imported with only the stdlib, numpy and DEST on the path (no
# site-packages), and a seeded multivariate TPE study asked and told in memory.
NUMPY_DIR=$("$PY" -c "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))")
mkdir -p "$TMP/numpy-only"
ln -s "$NUMPY_DIR/numpy" "$TMP/numpy-only/numpy"
for lib in "$NUMPY_DIR"/numpy.libs "$NUMPY_DIR"/numpy-*.dist-info; do
  [ -e "$lib" ] && ln -s "$lib" "$TMP/numpy-only/"
done
PYTHONPATH="$DEST:$TMP/numpy-only" "$PY" -S - <<'PY'
import sys
import optuna
from optuna.distributions import IntDistribution

optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(
    direction="maximize", sampler=optuna.samplers.TPESampler(seed=0, multivariate=True, n_startup_trials=3)
)
for _ in range(8):
    trial = study.ask({"x": IntDistribution(0, 7)})
    study.tell(trial, -abs(trial.params["x"] - 5))
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "alembic", "yaml", "scipy", "torch"})
assert not heavy, heavy
print(f"optuna {optuna.__version__} works from the carried folder alone (best x={study.best_params['x']})")
PY
