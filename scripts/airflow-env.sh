# Source me: the embedded Airflow (SQLite metadata DB, AIRFLOW_HOME inside the repo, our dags/).
# SOLARIS_AIRFLOW_HOME puts that home elsewhere (bench/scheduled.py gives each run its own); a global
# AIRFLOW_HOME of yours is deliberately not followed, so our DAGs never land in your Airflow.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$ROOT/.venv/bin:$PATH"
export AIRFLOW_HOME="${SOLARIS_AIRFLOW_HOME:-$ROOT/airflow_home}"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-4}
export AIRFLOW__API__HOST=${AIRFLOW__API__HOST:-127.0.0.1}
export AIRFLOW__LOGGING__LOGGING_LEVEL=${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}
export PYSPARK_PYTHON="$ROOT/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$ROOT/.venv/bin/python"
export TZ=UTC
