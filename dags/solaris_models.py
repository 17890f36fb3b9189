"""
### SOLARIS models

Daily (or on demand): train the foundation model on events up to `as_of`, then the baseline
vertical model, which precompute uses as its verifier, and the distilled VM (the soft-label
baseline SOLARIS is compared with; its soft labels are cross-fitted by default, which trains
`model.distillation.teacher_folds` extra FMs on parts of the window), and the speculator (the
learned blend of the candidate sources and the request verifier, fit on the busiest hours of the
week before `as_of`). Each writes a new versioned checkpoint under
`warehouse/models/<role>/` and moves its `LATEST` pointer atomically; the next precompute run
picks the new versions up and records them in every row it writes (`fm_version`,
`verifier_version`). `max_epochs` defaults to the config's `model.training.max_epochs`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

from solaris.orchestration import AS_OF_TEMPLATE, TIME_SCHEMA, ConfigParams, spark_submit_kwargs

CONFIG = ConfigParams(max_epochs="model.training.max_epochs")

with DAG(
    dag_id="solaris_models",
    doc_md=__doc__,
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["solaris", "models"],
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={
        "as_of": Param(None, type=["null", "string"], **TIME_SCHEMA,
                       description="train on events up to this UTC time; empty = the run's logical date"),
        "max_epochs": CONFIG.param(Param, "max_epochs", "upper bound (early stopping)", type="integer", minimum=1,
                                   maximum=50),
    },
) as dag:
    train_fm = SparkSubmitOperator(
        task_id="train_fm",
        doc_md="Train the FM on point-in-time examples; save a versioned checkpoint.",
        **spark_submit_kwargs("train_fm", CONFIG.args("--as-of", AS_OF_TEMPLATE)),
    )
    train_verifier = SparkSubmitOperator(
        task_id="train_verifier",
        doc_md="Train the baseline VM (the verifier used by precompute).",
        **spark_submit_kwargs("train_vm", CONFIG.args("--as-of", AS_OF_TEMPLATE, "--variant", "baseline")),
    )
    train_distilled = SparkSubmitOperator(
        task_id="train_distilled",
        doc_md=(
            "Train the distilled VM: soft labels from FMs of the new FM's architecture, cross-fitted over time folds."
        ),
        **spark_submit_kwargs("train_vm", CONFIG.args("--as-of", AS_OF_TEMPLATE, "--variant", "distilled")),
    )
    train_speculator = SparkSubmitOperator(
        task_id="train_speculator",
        doc_md=(
            "Fit the speculation blend and the request verifier on the busiest past ticks (events <= as-of): "
            "what `candidates` and `score` use by default."
        ),
        **spark_submit_kwargs("train_speculator", ["--as-of", AS_OF_TEMPLATE]),
    )
    train_fm >> [train_verifier, train_distilled, train_speculator]
