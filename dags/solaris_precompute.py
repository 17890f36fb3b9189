"""
### SOLARIS hourly precompute

Every hour, for `as_of` = the run's logical time (or the `as_of` Param of a manual trigger):

0. **events_arrived**: skip the run when the warehouse's newest event is older than the hour (a
   warehouse of past events, a stopped ingest): nothing is written, serving keeps its snapshot;
1. **candidates**: speculate the (user, item) pairs of the next `horizon` (`sql/candidates.sql`);
2. **score**: the verifier rule (default `request`: the speculator's P(requested within the TTL),
   before the FM), FM pair embeddings in a Spark `mapInArrow` UDF for the kept pairs, MERGE them
   into `pair_embeddings` with `expires_at = as_of + ttl_hours`;
3. **expire**: delete pair embeddings past their TTL, and the rows of `candidates`,
   `pair_embeddings_log`, `quarantine` and `runs` older than their `retention.*`; VACUUM (retention
   guard on) at the midnight run (`precompute.vacuum_every_hours`);
4. **announce**: emit the `pair_embeddings` Asset with `{"as_of": ...}` in the event extra, which
   schedules the enrichment DAG.

Runs never overlap (`max_active_runs=1`); each task retries with exponential backoff, and reruns
of the same hour replace their own output. Spark jobs go through `spark-submit` on the
`spark_default` connection (`local[*]` by default; point it at a cluster to scale out).

The tuning Params default to the loaded config's values (`$SOLARIS_CONFIG` or `conf/solaris.yaml`);
a run passes `--set` to the jobs only for the Params its trigger changed.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param, task

from solaris.orchestration import (
    AS_OF_TEMPLATE,
    HOURLY_DEFAULT_ARGS,
    TIME_SCHEMA,
    ConfigParams,
    events_arrived,
    stage_operators,
)
from solaris.pipeline import PRECOMPUTE

PAIR_EMBEDDINGS = Asset("solaris://pair_embeddings")
CONFIG = ConfigParams(ttl_hours="precompute.ttl_hours", candidate_budget="precompute.candidates.budget",
                      verifier_threshold="precompute.verifier.threshold",
                      request_threshold="precompute.verifier.request_threshold",
                      request_min_per_user="precompute.verifier.request_min_per_user",
                      request_budget_per_active_user="precompute.verifier.request_budget_per_active_user")

with DAG(
    dag_id="solaris_precompute",
    doc_md=__doc__,
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["solaris", "precompute"],
    default_args=HOURLY_DEFAULT_ARGS,
    params={
        "as_of": Param(None, type=["null", "string"], **TIME_SCHEMA,
                       description="logical time (UTC, ISO-8601); empty = the run's logical date"),
        "ttl_hours": CONFIG.param(Param, "ttl_hours", "embedding TTL in hours", type="number", exclusiveMinimum=0,
                                  maximum=168),
        "candidate_budget": CONFIG.param(Param, "candidate_budget", "max candidate pairs per run", type="integer",
                                         minimum=1),
        "request_threshold": CONFIG.param(Param, "request_threshold",
                                          "request rule (default): keep pairs with P(requested within the TTL) >= this",
                                          type=["null", "number"], minimum=0, maximum=1),
        "request_budget_per_active_user": CONFIG.param(Param, "request_budget_per_active_user",
                                               "written pairs per user with candidates, on average (the threshold "
                                               "is raised to fit; empty = no such budget)",
                                               type=["null", "number"], exclusiveMinimum=0),
        "request_min_per_user": CONFIG.param(Param, "request_min_per_user",
                                             "request rule: each user's best m pairs are kept below the threshold "
                                             "too (tier 3 for every candidate user)", type="integer", minimum=0),
        "verifier_threshold": CONFIG.param(Param, "verifier_threshold",
                                           "relevance rule (and the fallback without a speculator): keep pairs with "
                                           "verifier probability >= this",
                                           type=["null", "number"], minimum=0, maximum=1),
    },
) as dag:
    tasks = stage_operators(SparkSubmitOperator, PRECOMPUTE, CONFIG.args("--as-of", AS_OF_TEMPLATE))
    arrived = task.short_circuit(task_id="events_arrived", doc_md="Skip the hour when no event reaches it.")(
        events_arrived)(AS_OF_TEMPLATE, window_minutes=60)
    arrived >> [tasks[stage.name] for stage in PRECOMPUTE if not stage.upstream]

    @task(outlets=[PAIR_EMBEDDINGS], doc_md="Emit the pair_embeddings Asset with the run's as-of.")
    def announce(as_of: str, *, outlet_events=None) -> str:
        outlet_events[PAIR_EMBEDDINGS].extra = {"as_of": as_of}
        return as_of

    tasks[PRECOMPUTE[-1].name] >> announce(AS_OF_TEMPLATE)
