"""
### SOLARIS enrichment and publish

Scheduled on the `solaris://pair_embeddings` Asset that every hourly precompute run emits; the
run's `as_of` arrives in the Asset event's extra (or comes from the `as_of` Param of a manual
trigger). Fills the coverage gaps left by direct precompute, then publishes a snapshot:

1. **user_aggregates**: tier 3, mean of each user's pair embeddings computed in the last 24 h;
2. **knn**: FAISS k-means centroids on a sample + per-cluster exact search over the FM's user
   representations; recall@k against exact search is logged and recorded in `runs`;
3. **impute**: tier 4 for users without a servable aggregate, from their neighbours' aggregates;
4. **item_aggregates**: tier 5, mean of each item's pair embeddings computed in the last 24 h, and
   tier 6, the other items of the last week imputed from their nearest items in the FM's item space
   (the tiers that serve a user with no history), in parallel with the user tiers;
5. **publish**: quality gate (counts, finite values, dimension, coverage not collapsed), then an
   atomic manifest pinning the Delta versions the resolver loads. A refused snapshot fails the
   task and publishes nothing; serving keeps the previous one.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param

from solaris.orchestration import ASSET_AS_OF_TEMPLATE, HOURLY_DEFAULT_ARGS, TIME_SCHEMA, stage_operators
from solaris.pipeline import ENRICHMENT

PAIR_EMBEDDINGS = Asset("solaris://pair_embeddings")
AS_OF = ["--as-of", ASSET_AS_OF_TEMPLATE]

with DAG(
    dag_id="solaris_enrichment",
    doc_md=__doc__,
    schedule=[PAIR_EMBEDDINGS],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    is_paused_upon_creation=False,
    max_active_runs=1,
    tags=["solaris", "enrichment"],
    default_args=HOURLY_DEFAULT_ARGS,
    params={
        "as_of": Param(None, type=["null", "string"], **TIME_SCHEMA,
                       description="logical time (UTC); empty = the as-of of the triggering precompute run"),
    },
) as dag:
    stage_operators(SparkSubmitOperator, ENRICHMENT, AS_OF)
