#!/usr/bin/env bash
# spark-submit with the Delta JARs resolved at set-up, for any job file:
#   scripts/spark-submit.sh [spark-submit options] jobs/ingest.py --input ml-100k
# Equivalent to: spark-submit --jars "$(ls jars/*.jar | paste -sd,)" ...
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
jars=$(ls "$ROOT"/jars/*.jar 2>/dev/null | paste -sd, -)
[ -n "$jars" ] || { echo "no Delta JARs in $ROOT/jars: run 'make setup'" >&2; exit 2; }
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$ROOT/.venv/bin/python}
# The driver JVM maps set-up's class-data-sharing archive when there is one (solaris/class_archive.py);
# a --conf spark.driver.extraJavaOptions=... or --driver-java-options of yours replaces this one.
java_options="-Duser.timezone=UTC"
if [ -f "$ROOT/jars/spark-classes.jsa" ]; then java_options+=" -XX:SharedArchiveFile=$ROOT/jars/spark-classes.jsa"; fi
exec "$ROOT/.venv/bin/spark-submit" --jars "$jars" --conf "spark.driver.extraJavaOptions=$java_options" "$@"
