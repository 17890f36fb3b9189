#!/usr/bin/env bash
# The whole test suite (after make lint), in two shards run side by side.
#
# Why two: the suite is latency-bound, not CPU-bound. Alone on 2 cores one process kept the CPU
# about 40 % busy: Spark local jobs on small tables, JVM start-ups of spark-submit and Airflow's
# task runner mostly wait. The Airflow shard (tests/e2e: `airflow dags test` runs sharing
# airflow_home's metadata DB, plus tests/dags reading that home) runs in the background; everything
# else (unit, integration, reliability: each test in its own temporary warehouse) in the foreground.
# The one longest in-process test, the CLI run of `solaris evaluate --quick` (three processes, two
# replays), runs in the background shard too: without it the foreground shard took about twice as
# long as the Airflow one (58 vs 36 min in the last timed run, c01eae7), so the suite waited on it.
# Nothing is skipped: the two shards are exactly tests/. Two, not more: with two the cores are already
# ~85 % busy on average (BENCHMARKS.md, "Test suite").
#   SOLARIS_TEST_SHARDS=1 make test   runs the suite in one process instead (one log, one summary)
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider)

if [ "${SOLARIS_TEST_SHARDS:-2}" = "1" ]; then
  exec "${PYTEST[@]}" tests
fi

log=$(mktemp -t solaris-background-tests.XXXXXX.log)
QUICK_EVALUATE=tests/integration/test_evaluate.py::test_quick_mode_through_the_cli_reports_every_variant_and_resumes
"${PYTEST[@]}" tests/e2e tests/dags "$QUICK_EVALUATE" > "$log" 2>&1 &
background_shard=$!
trap 'kill "$background_shard" 2>/dev/null || true' INT TERM
echo "[test] tests/e2e + tests/dags + the quick evaluation run in the background (log: $log); unit, integration, reliability here"
"${PYTEST[@]}" tests/unit tests/integration tests/reliability --deselect "$QUICK_EVALUATE"
rest=$?
echo "[test] waiting for the background shard (tests/e2e + tests/dags + the quick evaluation)"
wait "$background_shard"
background=$?
echo "==================== tests/e2e + tests/dags + the quick evaluation (ran in parallel) ===================="
cat "$log"
echo "[test] unit+integration+reliability exit $rest; e2e+dags+quick evaluation exit $background"
if [ "$rest" -ne 0 ] || [ "$background" -ne 0 ]; then
  exit 1
fi
