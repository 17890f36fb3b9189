"""
### SOLARIS stream (incremental precompute)

Every `stream.schedule` (cron, every 5 minutes by default), `events_arrived` skips the run when no
events version is newer than the query's checkpoint (the Delta log and the checkpoint files, no
JVM); otherwise one task runs `jobs/stream.py --trigger available-now`: the Structured Streaming
query over the Delta `events` table processes every event committed since its last run, in
micro-batches, then exits. Per micro-batch, the users with new events are re-speculated (the hourly
candidates rules, restricted to them) at the batch's newest event time, scored by the FM into
`pair_embeddings` / `pair_embeddings_log`, their tier-3 aggregates refreshed, and a manifest
`snapshot-<as-of>-stream-b<batch>` published for serving.

The query's checkpoint (`stream.checkpoint_dir` under the warehouse) records what was processed: a
failed or killed run is resumed by the next one (or the retry), redoing an unfinished batch under
the same run id, which replaces its own rows. Runs never overlap (`max_active_runs=1`): two runs on
one checkpoint would race. The hourly chain (`solaris_precompute`, `solaris_enrichment`) keeps KNN,
imputation, the item tiers, expiry and the hourly publish.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, task

from solaris.orchestration import FREQUENT_DEFAULT_ARGS, spark_submit_kwargs, stream_events_arrived, stream_schedule

with DAG(
    dag_id="solaris_stream",
    doc_md=__doc__,
    schedule=stream_schedule(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["solaris", "stream"],
    default_args=FREQUENT_DEFAULT_ARGS,
) as dag:
    stream = SparkSubmitOperator(
        task_id="stream", doc_md="The streaming query over `events`, available-now: what arrived, then exit.",
        **spark_submit_kwargs("stream", ["--trigger", "available-now"], one_stage=True))
    arrived = task.short_circuit(task_id="events_arrived", doc_md="Skip the run when no event is new to the stream.")(
        stream_events_arrived)()
    arrived >> stream
