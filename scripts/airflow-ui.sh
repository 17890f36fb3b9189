#!/usr/bin/env bash
# Start the embedded Airflow (API server + scheduler + dag-processor) on http://127.0.0.1:8080.
# `airflow standalone` prints the admin password it generates; Ctrl-C stops the whole group.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
bash "$ROOT/scripts/airflow-setup.sh"
exec setsid airflow standalone
