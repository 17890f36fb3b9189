"""
### SOLARIS replay / backfill

Manual. Loads a dataset into `events`, trains the FM, the verifier and the speculator as of `start`, then replays
the hourly precompute from `start` to `end` hour by hour (candidates -> score/verify/write ->
hit rate -> expire), exactly as the hourly DAG would have run, seeing only events up to each tick.
Used by `make demo` (MovieLens-1M) and for backfills after an outage. Idempotent: ingest MERGEs
on `event_id`, ticks already done are skipped, so a failed replay is simply re-triggered.

With `evaluate` set, it then runs the knowledge-transfer evaluation with T0 = `start`
(`solaris evaluate`: FM/VM variants trained before T0, replay of the last `tail_hours` and the next
`eval_hours`, metrics.json + report.md + plots under `<warehouse>/evaluation/`).

Params that tune the config (epochs, TTL, evaluation window and seeds) default to the loaded config
(`$SOLARIS_CONFIG` or `conf/solaris.yaml`); the jobs get `--set` only for the ones a trigger changed.

Trigger from the UI with Params, or:
`airflow dags test solaris_replay -c '{"dataset": "ml-100k", "start": "1998-03-01T00:00:00Z", "end": "1998-03-01T03:00:00Z"}'`
"""  # noqa: E501 - a command to copy whole

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param

from solaris.orchestration import TIME_SCHEMA, ConfigParams, spark_submit_kwargs

CONFIG = ConfigParams(
    max_epochs="model.training.max_epochs",
    ttl_hours="precompute.ttl_hours",
    eval_hours="evaluation.eval_hours",
    tail_hours="evaluation.tail_hours",
    seeds="evaluation.seeds",
)

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
        "dataset": Param(
            "ml-1m",
            type="string",
            minLength=1,
            description="ml-1m, ml-100k, synthetic, or a file/folder path (MovieLens, RecBole, CSV, Parquet)",
        ),
        "id_mode": Param(
            "auto",
            type="string",
            enum=["auto", "int", "string"],
            description="ingest: auto keeps integer ids (rows with another id are quarantined) unless most values "
            "are not integers; int keeps them always; string hashes every id (originals in id_map)",
        ),
        "start": Param("2000-12-01T00:00:00Z", type="string", **TIME_SCHEMA, description="first tick (UTC)"),
        "end": Param("2000-12-01T03:00:00Z", type="string", **TIME_SCHEMA, description="end (exclusive)"),
        "max_epochs": CONFIG.param(
            Param, "max_epochs", "FM/VM training epochs (upper bound)", type="integer", minimum=1, maximum=50
        ),
        "ttl_hours": CONFIG.param(
            Param, "ttl_hours", "embedding TTL in hours", type="number", exclusiveMinimum=0, maximum=168
        ),
        "evaluate": Param(
            False, type="boolean", description="then run the knowledge-transfer evaluation at T0 = start"
        ),
        "eval_hours": CONFIG.param(
            Param, "eval_hours", "evaluation: hours scored after start", type="number", exclusiveMinimum=0, maximum=720
        ),
        "tail_hours": CONFIG.param(
            Param,
            "tail_hours",
            "evaluation: hours before start replayed to fine-tune the VM variants",
            type="number",
            exclusiveMinimum=0,
            maximum=720,
        ),
        "seeds": CONFIG.param(Param, "seeds", "evaluation: seeds (mean ± std)", type="integer", minimum=1, maximum=20),
    },
) as dag:
    ingest = SparkSubmitOperator(
        task_id="ingest",
        doc_md="Load the dataset into `events` (bad rows to `quarantine`, their counts by reason in the task log: "
        "bad ids, timestamps before `ingest.min_event_time` or after the wall clock); idempotent MERGE.",
        **spark_submit_kwargs("ingest", ["--input", "{{ params.dataset }}", "--id-mode", "{{ params.id_mode }}"]),
    )
    train_fm = SparkSubmitOperator(
        task_id="train_fm",
        doc_md="Train the FM on events up to `start`.",
        **spark_submit_kwargs("train_fm", CONFIG.args("--as-of", "{{ params.start }}", params=["max_epochs"])),
    )
    train_verifier = SparkSubmitOperator(
        task_id="train_verifier",
        doc_md="Train the baseline VM (the verifier) on events up to `start`.",
        **spark_submit_kwargs(
            "train_vm", CONFIG.args("--as-of", "{{ params.start }}", "--variant", "baseline", params=["max_epochs"])
        ),
    )
    train_speculator = SparkSubmitOperator(
        task_id="train_speculator",
        doc_md="Fit the speculation blend and the request verifier on the busiest ticks of the week before `start`.",
        **spark_submit_kwargs("train_speculator", CONFIG.args("--as-of", "{{ params.start }}", params=["ttl_hours"])),
    )
    replay = SparkSubmitOperator(
        task_id="replay",
        doc_md="Hour-by-hour precompute from `start` to `end`, with hit rates.",
        **spark_submit_kwargs(
            "replay", CONFIG.args("--start", "{{ params.start }}", "--end", "{{ params.end }}", params=["ttl_hours"])
        ),
    )
    evaluate_requested = ShortCircuitOperator(
        task_id="evaluate_requested",
        doc_md="Continue to the evaluation only when the `evaluate` Param is set (else it is skipped).",
        python_callable=lambda params: bool(params["evaluate"]),
    )
    evaluate = SparkSubmitOperator(
        task_id="evaluate",
        doc_md="Knowledge-transfer evaluation at T0 = `start` (report under `<warehouse>/evaluation/`).",
        **spark_submit_kwargs("evaluate", CONFIG.args("--as-of", "{{ params.start }}")),
    )
    ingest >> train_fm >> train_verifier >> train_speculator >> replay >> evaluate_requested >> evaluate
