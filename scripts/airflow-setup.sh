#!/usr/bin/env bash
# Idempotent: initialise the embedded Airflow metadata DB and the spark_default connection.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
mkdir -p "$AIRFLOW_HOME"
if [ ! -f "$AIRFLOW_HOME/.migrated" ] || [ "$AIRFLOW_HOME/.migrated" -ot "$ROOT/requirements.txt" ]; then
  echo "[setup] airflow db migrate (AIRFLOW_HOME=$AIRFLOW_HOME)"
  airflow db migrate >/dev/null
  touch "$AIRFLOW_HOME/.migrated"
fi
# A fresh DB has no spark_default and the hook would fall back to --master yarn: create it once.
if ! airflow connections get spark_default >/dev/null 2>&1; then
  airflow connections add spark_default --conn-type spark --conn-host 'local[*]' >/dev/null
  echo "[setup] created Airflow connection spark_default -> local[*]"
fi
