"""
### SOLARIS replay / backfill

Manual. Loads a dataset into `events`, trains the FM and the verifier as of `start`, then replays
the hourly precompute from `start` to `end` hour by hour (candidates -> score/verify/write ->
hit rate -> expire), exactly as the hourly DAG would have run, seeing only events up to each tick.
Used by `make demo` (MovieLens-1M) and for backfills after an outage. Idempotent: ingest MERGEs
on `event_id`, ticks already done are skipped, so a failed replay is simply re-triggered.

With `evaluate` set, it then runs the knowledge-transfer evaluation with T0 = `start`
(`solaris evaluate`: FM/VM variants trained before T0, replay of the last `tail_hours` and the next
`eval_hours`, metrics.json + report.md + plots under `<warehouse>/evaluation/`).

Trigger from the UI with Params, or:
`airflow dags test solaris_replay -c '{"dataset": "ml-100k", "start": "1998-03-01T00:00:00Z", "end": "1998-03-01T03:00:00Z"}'`
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param

from solaris.orchestration import AS_OF_PATTERN, spark_submit_kwargs

EPOCHS = ["--set", "model.training.max_epochs={{ params.max_epochs }}"]

with DAG(
    dag_id="solaris_replay",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["solaris", "replay", "backfill"],
    default_args={"retries": 1, "retry_delay": timedelta(minutes=1)},
    params={
        "dataset": Param("ml-1m", type="string", minLength=1,
                         description="ml-1m, ml-100k, synthetic, or a file/folder path (MovieLens, RecBole, CSV, Parquet)"),
        "start": Param("2000-12-01T00:00:00Z", type="string", pattern=AS_OF_PATTERN, description="first tick (UTC)"),
        "end": Param("2000-12-01T03:00:00Z", type="string", pattern=AS_OF_PATTERN, description="end (exclusive)"),
        "max_epochs": Param(1, type="integer", minimum=1, maximum=50, description="FM/VM training epochs (upper bound)"),
        "ttl_hours": Param(6, type="number", exclusiveMinimum=0, maximum=168, description="embedding TTL in hours"),
        "evaluate": Param(False, type="boolean", description="then run the knowledge-transfer evaluation at T0 = start"),
        "eval_hours": Param(24, type="number", exclusiveMinimum=0, maximum=720, description="evaluation: hours scored after start"),
        "tail_hours": Param(24, type="number", exclusiveMinimum=0, maximum=720,
                            description="evaluation: hours before start replayed to fine-tune the VM variants"),
        "seeds": Param(3, type="integer", minimum=1, maximum=20, description="evaluation: seeds (mean ± std)"),
    },
) as dag:
    ingest = SparkSubmitOperator(
        task_id="ingest",
        doc_md="Load the dataset into `events` (bad rows to `quarantine`); idempotent MERGE.",
        **spark_submit_kwargs("ingest", ["--input", "{{ params.dataset }}"]),
    )
    train_fm = SparkSubmitOperator(
        task_id="train_fm",
        doc_md="Train the FM on events up to `start`.",
        **spark_submit_kwargs("train_fm", ["--as-of", "{{ params.start }}", *EPOCHS]),
    )
    train_verifier = SparkSubmitOperator(
        task_id="train_verifier",
        doc_md="Train the baseline VM (the verifier) on events up to `start`.",
        **spark_submit_kwargs("train_vm", ["--as-of", "{{ params.start }}", "--variant", "baseline", *EPOCHS]),
    )
    replay = SparkSubmitOperator(
        task_id="replay",
        doc_md="Hour-by-hour precompute from `start` to `end`, with hit rates.",
        **spark_submit_kwargs("replay", ["--start", "{{ params.start }}", "--end", "{{ params.end }}",
                                         "--set", "precompute.ttl_hours={{ params.ttl_hours }}"]),
    )
    evaluate_requested = ShortCircuitOperator(
        task_id="evaluate_requested",
        doc_md="Continue to the evaluation only when the `evaluate` Param is set (else it is skipped).",
        python_callable=lambda params: bool(params["evaluate"]),
    )
    evaluate = SparkSubmitOperator(
        task_id="evaluate",
        doc_md="Knowledge-transfer evaluation at T0 = `start` (report under `<warehouse>/evaluation/`).",
        **spark_submit_kwargs("evaluate", [
            "--as-of", "{{ params.start }}", *EPOCHS, "--set", "precompute.ttl_hours={{ params.ttl_hours }}",
            "--set", "evaluation.eval_hours={{ params.eval_hours }}", "--set", "evaluation.tail_hours={{ params.tail_hours }}",
            "--set", "evaluation.seeds={{ params.seeds }}"]),
    )
    ingest >> train_fm >> train_verifier >> replay >> evaluate_requested >> evaluate
