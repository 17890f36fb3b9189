"""One typed configuration for the whole pipeline.

Why one object: jobs, tests, DAGs and benchmarks must agree on paths, sizes and thresholds, so they
all load ``conf/solaris.yaml`` through :func:`load_config` (once per process) and pass the validated
:class:`SolarisConfig` down. Unknown keys are errors (a typo must not silently fall back to a
default), and every error names the dotted key that is wrong.

One source of defaults: the field defaults below. ``conf/solaris.yaml`` is their annotated copy
(a unit test keeps the two equal); a deployment's own YAML (``--config`` / ``$SOLARIS_CONFIG``) only
needs the keys it changes, and the DAGs' Params take their defaults from the loaded config.

Where the default file comes from: package data of ``solaris.conf`` (``conf/`` in the checkout,
``solaris/conf/`` in an installed wheel), read with :mod:`importlib.resources`. Relative paths in the
config (``warehouse``, ``spark.jars_dir``, ``spark.class_data_archive``) are resolved against, in this
order (:func:`base_dir_for`):

1. ``$SOLARIS_HOME`` when set (a deployment's project folder);
2. for a file given by ``--config`` / ``$SOLARIS_CONFIG``: the folder above the file's folder
   (``<project>/conf/solaris.yaml`` -> ``<project>``), as before;
3. for the packaged default: the repo root when the package runs from a source checkout (editable
   install: the file is ``<root>/conf/solaris.yaml`` next to ``<root>/setup.py``), so DAGs, ``make
   demo`` and tests keep using ``./warehouse`` and ``./jars``; otherwise (installed wheel) the
   current working directory, like any command-line tool.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Iterable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from solaris.errors import RefusedError

CONFIG_PACKAGE, CONFIG_FILE = "solaris.conf", "solaris.yaml"  # the packaged default (conf/solaris.yaml)
CONFIG_ENV_VAR = "SOLARIS_CONFIG"
HOME_ENV_VAR = "SOLARIS_HOME"
WAREHOUSE_ENV_VAR = "SOLARIS_WAREHOUSE"


class ConfigError(RefusedError):
    """Raised for any invalid configuration; the message names the offending key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class SparkConfig(_Strict):
    master: str = "local[*]"
    app_name_prefix: str = "solaris"
    # spark.sql.shuffle.partitions; null: one per thread of a local master, 8 on a cluster (why:
    # solaris/spark.py shuffle_partitions).
    shuffle_partitions: int | None = Field(None, ge=1)
    driver_memory: str = "4g"
    ui_enabled: bool = False
    # Adaptive query execution (spark.sql.adaptive.enabled); why it is on: solaris/spark.py.
    adaptive: bool = True
    # Whole-stage code generation (spark.sql.codegen.wholeStage); why it is on: solaris/spark.py.
    whole_stage_codegen: bool = True
    jars_dir: str = "jars"
    arrow_max_records_per_batch: int = Field(10000, ge=1)
    # Compiled query classes kept per JVM (spark.sql.codegen.cache.maxEntries); why: solaris/spark.py.
    codegen_cache_entries: int = Field(2000, ge=100)
    # Size of one page of Spark's Tungsten memory (spark.buffer.pageSize, less a 16-byte array header);
    # why not Spark's default, which grows with the heap: solaris/spark.py.
    buffer_page_size: str = Field("2m", pattern=r"^[1-9][0-9]*[kmg]$")
    # Extra driver JVM options of a process that runs one hourly stage and exits (a spark-submit task,
    # `solaris <stage>`); not of replay / evaluate sessions. Why C1 only: solaris/spark.py.
    one_stage_java_options: str = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    # Extra driver JVM options of a long-lived session that runs many stages (replay, evaluate, the
    # tests' session, the benchmarks); not of one-stage processes. Why the parallel collector: solaris/spark.py.
    session_java_options: str = "-XX:+UseParallelGC"
    # Class-data-sharing archive of Spark's and Delta's classes, written by `make setup`; used by
    # every driver JVM when the file exists (null: never). Why: solaris/spark.py.
    class_data_archive: str | None = "jars/spark-classes.jsa"


class StorageConfig(_Strict):
    """How a Delta table is read and written: by Spark, or on the driver with ``deltalake`` and Arrow.

    ``driver_max_rows``: the one size bound of the engine rule (:func:`solaris.storage.engine.choose_engine`).
    A write of a Spark frame of at most this many rows is collected once and written by ``deltalake``
    (MERGE / run replacement), a small table handed to Spark as a frame is read by ``deltalake``, and
    publish checks pinned tier tables of at most this many rows in all on the driver; anything larger
    goes to Spark (0: Spark always). Why a bound: Spark's fixed cost per access (snapshot, planning,
    jobs) is about a second, more than a tick's few thousand rows cost on the driver, while the
    driver must never hold a table it cannot; 1,000,000 rows of a tier table is ~300 MB of Arrow.
    Reads whose rows the caller needs on the driver anyway (a run's rows, the events as pandas, the
    resolver's tiers) have no bound: Spark would collect the same rows.
    """

    driver_max_rows: int = Field(1_000_000, ge=0)


class TablesConfig(_Strict):
    events: str = "events"
    id_map: str = "id_map"
    candidates: str = "candidates"
    item_statistics: str = "item_statistics"
    pair_embeddings: str = "pair_embeddings"
    pair_embeddings_log: str = "pair_embeddings_log"
    user_embeddings: str = "user_embeddings"
    user_neighbors: str = "user_neighbors"
    imputed_embeddings: str = "imputed_embeddings"
    item_embeddings: str = "item_embeddings"
    imputed_item_embeddings: str = "imputed_item_embeddings"
    quarantine: str = "quarantine"
    runs: str = "runs"

    @model_validator(mode="after")
    def _plain_names(self) -> "TablesConfig":
        for key, name in self.model_dump().items():
            if not name or "/" in name or ".." in name or name.startswith("."):
                raise ValueError(f"table name for {key!r} must be a plain folder name, got {name!r}")
        return self


# The earliest event time a table may hold and stay readable by pandas (int64 nanoseconds reach back
# to 1677-09-21); the matching upper bound is enforced on the wall clock by solaris.ingest.events.
_PANDAS_SAFE_FLOOR = datetime(1678, 1, 1, tzinfo=timezone.utc)


class IngestConfig(_Strict):
    """Validation rules of ``solaris ingest`` (solaris/ingest/events.py; docs/operations.md, "Ingest").

    Time sanity applies with or without ``--as-of``: an event later than the ingest's wall clock +
    ``wall_clock_skew_hours`` or earlier than ``min_event_time`` is quarantined. Why: such a row
    would sit in ``events`` forever, and one past 2262-04-11 makes the table unreadable to pandas
    (its timestamps are int64 nanoseconds). 24 h of skew covers any time zone written as UTC (at
    most 14 h off) and clocks that disagree; 1990-01-01 predates every online interaction log
    (MovieLens starts in 1995) while rejecting epoch 0 and the small numbers of "unknown time"
    sentinels and unit mistakes (days or hours read as seconds).

    ``auto_int_min_share``: ``--id-mode auto`` keeps a column's integer ids when at least this share
    of its non-blank values are non-negative integers (the other rows are quarantined); below it,
    every id of the column is hashed (originals kept in ``id_map``).
    """

    label_threshold: float = 4.0
    rating_min: float = 0.0
    rating_max: float = 5.0
    max_future_skew_hours: float = Field(0.0, ge=0)
    wall_clock_skew_hours: float = Field(24.0, ge=0, le=24 * 366)
    min_event_time: datetime = datetime(1990, 1, 1, tzinfo=timezone.utc)
    auto_int_min_share: float = Field(0.5, gt=0, le=1)

    @field_validator("min_event_time")
    @classmethod
    def _utc_floor(cls, value: datetime) -> datetime:
        value = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
        if value < _PANDAS_SAFE_FLOOR:  # pandas' nanosecond timestamps start in 1677
            raise ValueError(f"must be at or after {_PANDAS_SAFE_FLOOR.isoformat()}")
        return value

    @model_validator(mode="after")
    def _range(self) -> "IngestConfig":
        if self.rating_min > self.rating_max:
            raise ValueError("rating_min must be <= rating_max")
        return self


class SyntheticConfig(_Strict):
    n_events: int = Field(100_000, ge=1)
    n_users: int = Field(2000, ge=1)
    n_items: int = Field(1000, ge=2)
    latent_dim: int = Field(16, ge=1)
    start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    days: float = Field(60, gt=0)
    popularity_exponent: float = Field(1.1, gt=0)
    drift: float = Field(0.3, ge=0)
    chunks: int = Field(8, ge=1)

    @field_validator("start")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class FMConfig(_Strict):
    """Foundation model sizes: deliberately heavier than the VM (history attention + deep tower)."""

    id_buckets: int = Field(65_536, ge=16)
    d_model: int = Field(64, ge=4)
    heads: int = Field(2, ge=1)
    tower: tuple[int, ...] = (256, 128)
    dropout: float = Field(0.1, ge=0, lt=1)
    user_id_dropout: float = Field(0.5, ge=0, le=1)  # training rows whose user-id vector is zeroed (FMSpec)
    # Upper bound on the FM's epochs (and its cross-fitted teachers'), below model.training.max_epochs.
    # Why: the FM is the one model a daily refresh and the evaluation train on hundreds of thousands of
    # events with histories; its cost per epoch is what bounds both on a small machine.
    max_epochs: int = Field(2, ge=1)
    # The FM's own mini-batch and learning-rate schedule (the VM's stay model.training's). Why: with two
    # epochs the FM gets few optimizer steps at the shared batch of 2048, and a constant rate ends its
    # last epoch on noisy weights; smaller batches with a rate annealed to zero reach a lower NE in the
    # same two epochs, while the VM gains nothing from either (docs/models.md, measured).
    batch_size: int = Field(256, ge=1)
    lr_schedule: Literal["constant", "linear"] = "linear"
    self_attention: bool = False  # a self-attention layer over the history before target attention (FMSpec)
    # What the FM's history tokens carry about each past event: "rating" its rating level (1-5 stars
    # when the events have ratings, else liked or not), "label" only liked or not. Why: a rating says
    # more than the liked bit derived from it; the VM keeps the liked-rate counters (docs/models.md).
    history_feedback: Literal["rating", "label"] = "rating"

    @model_validator(mode="after")
    def _heads_divide(self) -> "FMConfig":
        if self.d_model % self.heads:
            raise ValueError("d_model must be a multiple of heads")
        return self


class VMConfig(_Strict):
    """Vertical (real-time) model: hashed ids into small tables plus two cheap numeric features."""

    id_buckets: int = Field(65_536, ge=16)
    id_dim: int = Field(8, ge=1)
    hidden: tuple[int, ...] = (32,)
    # Training rows whose user-id vector is zeroed, the table starting at zero (VMSpec; the FM's rule).
    # Why: a user the VM never trained on otherwise reads its bucket's untrained random vector, which
    # differs from seed to seed; with the rule it reads as the "unknown user" the model learned.
    user_id_dropout: float = Field(0.5, ge=0, le=1)


class TrainingConfig(_Strict):
    batch_size: int = Field(2048, ge=1)
    max_epochs: int = Field(8, ge=1)
    patience: int = Field(1, ge=0)
    # A training from fresh weights is not stopped early before this many optimizer steps: epochs
    # that end sooner are not counted against ``patience``. Why: on a small window an epoch is a few
    # optimizer steps, and after one or two of them a randomly initialised model's validation NE is
    # still noise around the base rate, so patience alone ended such trainings before they learned.
    # A warm start (``keep_initial``: the fine-tunes) is exempt: its epoch 0 is already a trained model.
    min_steps: int = Field(100, ge=0)
    learning_rate: float = Field(2e-3, gt=0)
    # ``linear``: the rate falls linearly from ``learning_rate`` to zero over the ``max_epochs``
    # budget of optimizer steps. Why an option: a fixed rate keeps the last epoch's steps as large as
    # the first, so a model stopped by the epoch cap ends on noisy weights; a decay ends it annealed.
    lr_schedule: Literal["constant", "linear"] = "constant"
    weight_decay: float = Field(0.0, ge=0)
    validation_fraction: float = Field(0.1, gt=0, lt=1)
    threads: int = Field(2, ge=1)
    max_train_examples: int | None = Field(None, ge=1)


class DistillationConfig(_Strict):
    """Soft-label distillation of the FM into the VM (the baseline SOLARIS is compared against).

    ``teacher``: where the soft labels come from. ``cross-fit`` (default) labels every training
    example with an FM trained on the other ``teacher_folds`` time folds, i.e. with the quality the
    FM has on traffic it has not seen, as a production teacher logs at serving time; ``in-sample``
    uses the served FM's logits on its own training data, which are partly memorised labels (on
    MovieLens-1M that student was worse than the baseline VM in 1 of 3 seeds, the cross-fitted one
    in none: docs/models.md).
    """

    temperature: float = Field(2.0, gt=0)
    weight: float = Field(0.5, ge=0, le=1)
    teacher: Literal["cross-fit", "in-sample"] = "cross-fit"
    teacher_folds: int = Field(2, ge=2)  # extra FM trainings per distilled VM, each on (folds-1)/folds of the data


class AdapterConfig(_Strict):
    """How the VM+SOLARIS model consumes the served FM values (docs/models.md compares both designs).

    ``concat`` (default): the vector and a one-hot of its tier concatenated into the VM's first layer
    (new weights starting at zero), fine-tuned with the VM. ``adapter`` (:mod:`solaris.models.adapter`):
    the VM frozen plus a per-tier residual on its logit from the FM score of the served vector (and,
    with ``vector``, a projection of the vector), a ridge logistic regression on the served log; a
    tier is switched off when it does not lower its own rows' log loss on the log's latest slice.
    Why concat is the default: the evaluation's per-tier strata (the served values against the placebo
    on each tier's own requests) favoured it; the comparison is in docs/models.md.
    ``channel`` (:mod:`solaris.models.vm`): concat's warm-started, fine-tuned VM that also reads the
    value's FM score and age, through input weights of its own and a per-tier linear path from the
    score to the logit, all starting at zero; the score path and the score/age/tier input weights
    learn at ``channel_learning_rate`` while the body and the vector's weights keep the fine-tune's
    rate. Not the default until the evaluation has measured it on every window.
    """

    design: Literal["adapter", "concat", "channel"] = "concat"
    vector: bool = True  # adapter: a per-tier projection of the standardised vector beside the FM score
    l2: float = Field(1e-3, ge=0)  # adapter: ridge weight on its parameters (inputs are standardised per tier)
    min_validation_rows: int = Field(50, ge=1)  # adapter: a tier with fewer validation rows stays off
    # channel: the rate of the channel's own weights (None: the pre-training rate, model.training.learning_rate)
    channel_learning_rate: float | None = Field(None, gt=0)


class ModelConfig(_Strict):
    embedding_dim: int = Field(64, ge=1, le=4096)
    history_length: int = Field(64, ge=1)
    fm: FMConfig = FMConfig()
    vm: VMConfig = VMConfig()
    adapter: AdapterConfig = AdapterConfig()
    training: TrainingConfig = TrainingConfig()
    distillation: DistillationConfig = DistillationConfig()


class CandidateConfig(_Strict):
    """Speculation (sql/candidates.sql): who is likely to ask, and for which items.

    ``sources`` switches the rules on (each tags its pairs in ``source``); ``blend`` ranks a user's
    pairs by the linear model trained on past ticks (``learned``: the speculator checkpoint, see
    ``solaris.stages.train_speculator``) or by the hand weights ``weight_<source>`` (``hand``). A learned blend
    falls back to the hand weights when no checkpoint trained at or before the run's as-of exists.
    """

    lookback_hours: float = Field(168, gt=0)  # users active in this window get candidates
    # Default: the speculation bench/speculation.py measured best per FM pass (BENCHMARKS.md). Retrieval
    # stays opt-in: it costs an FM pass over every user a tick and did not raise the hit rate there.
    sources: tuple[Literal["cooc", "trending", "recent", "next", "popular", "retrieval"], ...] = (
        "cooc", "trending", "recent", "next", "popular")
    source_items: int = Field(200, ge=1)  # each source's best items per user (before the blend)
    recent_items: int = Field(20, ge=1)
    cooc_days: float = Field(30, gt=0)
    cooc_items_per_user: int = Field(30, ge=2)
    cooc_neighbors: int = Field(30, ge=1)
    # The item-item statistics (`item_cooc`, `item_next`) are computed as of the run's as-of floored to
    # this many hours (UTC, epoch-aligned: 24 = midnight), from events <= that time; 1 = every run.
    # Why a day: they are the costliest views of a tick and move slowly, so the runs of one day share
    # one computation (stored in `item_statistics`), and day-old statistics hit as many next-hour
    # requests as fresh ones (BENCHMARKS.md, "Speculation hit rate"). See docs/architecture.md §5.
    item_stats_hours: int = Field(24, ge=1, le=168)
    # Above 1, each period's statistics are also stored in the `item_statistics` table, so that runs
    # in other processes (a spark-submit per stage) read them instead of recomputing; periods older
    # than this many days before the newest one written are dropped from it.
    item_stats_keep_days: float = Field(7, gt=0)
    trending_hours: float = Field(72, gt=0)
    trending_items: int = Field(50, ge=0)
    next_window: int = Field(10, ge=1)  # session continuation: the events right after an item
    next_neighbors: int = Field(50, ge=1)  # next items kept per item
    next_seeds: int = Field(20, ge=1)  # the user's last items whose next items are proposed
    popular_days: float = Field(90, gt=0)
    popular_items: int = Field(300, ge=0)
    retrieval_days: float = Field(30, gt=0)  # item representation: mean FM user vector of its engagers in this window
    weight_cooc: float = Field(1.0, ge=0)
    weight_trending: float = Field(0.5, ge=0)
    weight_recent: float = Field(0.3, ge=0)
    weight_next: float = Field(1.0, ge=0)
    weight_popular: float = Field(0.5, ge=0)
    weight_retrieval: float = Field(0.5, ge=0)
    blend: Literal["learned", "hand"] = "learned"
    speculator_checkpoint: str = "models/speculator"  # under the warehouse; a root (LATEST) or a version folder
    # Candidates per user, by the blend; the request verifier then spends the FM where requests are
    # likely, up to its own top-k. Why as many as 200: a user in a rating burst asks for tens of items
    # an hour, and the request model, not a fixed per-user cap, is what keeps the FM passes down
    # (BENCHMARKS.md, "Speculation hit rate").
    per_user: int = Field(200, ge=1)
    budget: int = Field(200_000, ge=1)


class SpeculatorTrainingConfig(_Strict):
    """How the blend and the request verifier are fit (``solaris train-speculator``): past ticks only.

    Ticks are the busiest hours (most distinct requesters) of the ``days`` days before the as-of,
    each early enough that its TTL window ends by the as-of, so every label is an event <= as-of.
    """

    days: float = Field(7, gt=0)
    ticks: int = Field(8, ge=1)
    negative_rate: float = Field(0.1, gt=0, le=1)  # share of unrequested pairs kept (hash-sampled, reweighted)
    l2: float = Field(1.0, ge=0)


class VerifierConfig(_Strict):
    """Which scored pairs are written: ``request`` (P(requested within the TTL), the speculator's
    request model, applied before the FM so unlikely pairs cost no FM pass) or ``relevance`` (the
    baseline VM's probability that the user likes the item). Threshold, global budget and per-user
    top-k apply to the rule's score.

    Why ``request`` by default: it spends the FM on pairs that get requested (BENCHMARKS.md, issue
    #16). Without a speculator checkpoint there are no request scores and the score stage applies
    ``relevance`` with its own threshold and top-k, as before the speculator existed.
    """

    rule: Literal["request", "relevance"] = "request"
    threshold: float | None = Field(0.5, ge=0, le=1)  # for rule relevance
    # for rule request: a floor; below it a pair is not worth an FM pass whatever the budget leaves.
    request_threshold: float | None = Field(0.001, ge=0, le=1)
    top_k_per_user: int | None = Field(20, ge=1)  # for rule relevance
    # for rule request. Why 200 and not 50: the threshold, not the cap, should decide how many pairs a
    # user gets: users mid-burst get many, the rest few (BENCHMARKS.md measures the average per active
    # user); a cap of 50 cut the hits of the users who ask for the most items.
    request_top_k_per_user: int | None = Field(200, ge=1)
    # for rule request: each user's best m pairs are kept below the threshold (and the budget) too.
    # Why: a user all of whose candidates are unlikely requests would get no pair, hence no 24 h
    # aggregate (tier 3); m pairs per user buy that tier for at most m FM passes per candidate user.
    request_min_per_user: int = Field(1, ge=0)
    budget: int | None = Field(None, ge=1)
    # for rule request: a global budget per user with candidates in the run: at most this many written
    # pairs per such user on average (the floor's pairs included), the threshold raised to the
    # budget's boundary. Why a budget rather than a fixed threshold: the request model's calibration
    # drifts between refits, and a fixed threshold's written set (and its FM cost) drifts with it; a
    # budget spends the same FM passes each run on the pairs ranked most likely requested, across
    # users. Why 20: the written volume of the relevance rule (its top 20 per user), so the two rules
    # store as much.
    request_budget_per_active_user: float | None = Field(20, gt=0)

    def active_threshold(self) -> float | None:
        return self.request_threshold if self.rule == "request" else self.threshold

    def active_budget_per_user(self) -> float | None:
        """The request rule's budget per active user (the relevance rule has none, as before)."""
        return self.request_budget_per_active_user if self.rule == "request" else None

    def active_top_k(self) -> int | None:
        return self.request_top_k_per_user if self.rule == "request" else self.top_k_per_user

    def active_min_per_user(self) -> int:
        """Pairs kept per user whatever their score (0 under the relevance rule, as before)."""
        if self.rule != "request":
            return 0
        top_k = self.request_top_k_per_user
        return self.request_min_per_user if top_k is None else min(self.request_min_per_user, top_k)


class PrecomputeConfig(_Strict):
    ttl_hours: float = Field(6, gt=0)
    horizon_hours: float = Field(1, gt=0)
    fm_checkpoint: str = "models/fm"
    verifier_checkpoint: str = "models/vm_baseline"
    model_batch_size: int = Field(4096, ge=1)  # rows per FM forward pass (separate from Arrow batch size)
    torch_threads: int = Field(1, ge=1)  # per Python worker; local[2] runs 2 workers
    expiry_bucket: str = Field("hour", pattern="^(hour|day)$")
    # The scheduled expire VACUUMs pair_embeddings at hours whose as-of is a multiple of this (UTC
    # epoch hours: 24 = the midnight run). Why not hourly: solaris/stages/expire.py.
    vacuum_every_hours: int = Field(24, ge=1)
    candidates: CandidateConfig = CandidateConfig()
    speculator: SpeculatorTrainingConfig = SpeculatorTrainingConfig()
    verifier: VerifierConfig = VerifierConfig()


class EnrichmentConfig(_Strict):
    """Tiers 2-6: neighbour pairs, user aggregates over a window, KNN over FM user representations, imputation,
    item aggregates and their imputation from the FM's item space."""

    window_hours: float = Field(24, gt=0)  # user aggregate = mean of pair embeddings computed in this window
    aggregation: str = Field("mean", pattern="^(mean|recency)$")
    half_life_hours: float = Field(6, gt=0)  # for aggregation: recency
    l2_normalize: bool = False
    ttl_hours: float = Field(6, gt=0)  # expires_at of user aggregates and imputed embeddings
    knn_k: int = Field(10, ge=1)
    knn_clusters: int | None = Field(None, ge=1)  # None: about 2*sqrt(#users) (solaris.enrichment.knn.default_clusters)
    knn_nprobe: int | None = Field(None, ge=1)  # clusters searched per query; None: chosen from knn_target_recall
    knn_target_recall: float = Field(0.95, gt=0, le=1)  # nprobe = smallest reaching this on the k-means sample
    knn_sample: int = Field(100_000, ge=100)  # users sampled to train k-means
    knn_recall_sample: int = Field(500, ge=10)  # queries checked against exact search
    knn_index_hours: float = Field(24, ge=0)  # k-means centroids + nprobe reused this long (0: retrained every run)
    # Populations up to this size are searched on the driver, larger ones as Spark groups (0: always
    # Spark); same lists either way. Why: solaris/stages/knn.py.
    knn_driver_max_users: int = Field(50_000, ge=0)
    min_neighbors: int = Field(2, ge=1)
    min_similarity: float = Field(0.0, ge=-1, le=1)
    neighbor_pairs: bool = True  # tier 2: serve a missing pair from the user's neighbours' pairs of that item
    neighbor_pair_min_neighbors: int = Field(1, ge=1)  # neighbours with a servable (v, item) pair needed
    neighbor_pair_min_similarity: float = Field(0.0, ge=-1, le=1)  # neighbours below this similarity are ignored
    item_window_hours: float = Field(24, gt=0)  # item tier = mean of the item's pair embeddings computed in this window
    item_ttl_hours: float = Field(6, gt=0)  # expires_at of item aggregates
    item_min_pairs: int = Field(2, ge=1)  # an item aggregate needs this many users' pair embeddings
    item_neighbors: int = Field(10, ge=0)  # tier 6: impute an item from this many nearest items (FM item space); 0: off
    item_neighbor_min_similarity: float = Field(0.0, ge=0, le=1)  # nearest items below this cosine are ignored
    item_catalog_hours: float = Field(168, gt=0)  # items imputed = items with an event in this window before as_of
    # hourly manifests publish keeps (and the stream's since the oldest of them): the rollback window
    snapshots_kept: int = Field(24, ge=1)
    coverage_tolerance: float = Field(0.5, ge=0, le=1)  # refuse a snapshot whose coverage fell by more than this share

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "log_retention_hours" in data:
            raise ValueError("log_retention_hours moved to retention.pair_embeddings_log_hours")
        return data


class RetentionConfig(_Strict):
    """How much history the hourly ``expire`` keeps in the tables that every tick appends to.

    A table keeps the rows whose time column is later than ``as_of - hours`` (the half-open window
    ``(as_of - hours, as_of]`` the readers use); ``expire`` deletes the rest every hour and VACUUMs
    the tables with ``pair_embeddings`` (docs/architecture.md §6). Why each default, from the oldest
    row its readers need relative to the tick's as-of (:class:`SolarisConfig` refuses less):

    * ``candidates_hours`` (by ``as_of``): ``score`` and ``hit_rate`` read only the run of their own
      tick (the fast lane's too), before that tick's ``expire``; ``train-speculator`` recomputes the
      sources of its past ticks and reads no stored candidates. A hit rate measured outside a replay
      can only run once the run's horizon of requests is in, at tick ``t + horizon_hours``: the run
      must outlive that tick's expire, so more than ``precompute.horizon_hours``; 2 h (one hour of
      slack) keeps the dense hours' ~1M rows a run to two runs.
    * ``pair_embeddings_log_hours`` (by ``computed_at``): the user and item aggregates read
      ``(as_of - window_hours, as_of]`` (24 h each) right after the tick's expire; the second day
      lets a rerun or backfill of any hour of the previous day find its whole window.
    * ``runs_hours`` (by ``as_of``; rows of the hourly chain's jobs only, :func:`solaris.stages.expire`
      keeps ingest and training rows, a few a day, which record id modes and model versions): the
      evaluation reads the hit-rate, score and knn rows of its whole replay, ``tail_hours +
      eval_hours`` (48 h) before its last tick, and a resumed replay the rows of its ticks; a week
      for operators' audit.
    * ``quarantine_hours`` (by ``seen_at``): no stage reads it; a week of rejects for operators.
    """

    candidates_hours: float = Field(2, gt=0)
    pair_embeddings_log_hours: float = Field(48, gt=0)
    quarantine_hours: float = Field(168, gt=0)
    runs_hours: float = Field(168, gt=0)


class FreshnessConfig(_Strict):
    """The freshness curve every evaluation report carries (docs/evaluation.md, "The freshness curve").

    Why: a precomputed value is older than its request, and what the FM knew in those last minutes
    is out of its reach; the curve says how much of the FM's edge survives each age, so a reader
    knows what a pipeline that delivers values of that age could transfer at best. ``fm_ages_minutes``:
    the FM fed the history up to request - age (0: the FM at the request, the upper bound, always
    there); ``oracle_ages_minutes``: the VM+SOLARIS oracle model read the FM's exact pair computed at
    request - age. Besides these, both are placed at the serving tick (the existing FM at the serving
    tick and oracle). Each age other than 0 is one more FM pass over a window's scored requests.
    """

    fm_ages_minutes: tuple[int, ...] = (0, 1, 5, 15, 60)
    oracle_ages_minutes: tuple[int, ...] = (0, 1, 5)

    @field_validator("fm_ages_minutes", "oracle_ages_minutes")
    @classmethod
    def _sorted_minutes(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        if any(age < 0 for age in values):
            raise ValueError(f"ages are minutes before the request, >= 0: {list(values)}")
        return tuple(sorted(set(values)))

    @field_validator("fm_ages_minutes")
    @classmethod
    def _with_the_upper_bound(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        return values if 0 in values else (0, *values)  # the FM at the request: every TR's reference


class EvaluationConfig(_Strict):
    """Knowledge-transfer evaluation (``solaris evaluate``): time split, replay window, seeds.

    The FM that serves embeddings is trained on events up to ``T0 - tail_hours``; the replay runs
    hour by hour over ``(T0 - tail_hours, T0 + eval_hours]``. The tail gives the SOLARIS VM
    variants training examples whose FM features are what serving would have held for them (same
    TTL, same coverage gaps, from an FM that had not seen them); the eval window is scored.

    Every VM variant is fine-tuned on the same tail rows with the same budget
    (``finetune_batch_size``, ``finetune_learning_rate``, ``model.training.max_epochs`` and
    ``patience``), one thread, and may keep its warm start when no epoch beats it on validation NE.
    """

    seeds: int = Field(5, ge=1)  # every seed trains its own VMs (and, without share_replay, FM and replay)
    # True: per window, one serving FM, verifier, teacher and replay (seed ``seed``) shared by every seed, each
    # seed training its own VMs on the same served tail. Why: seed variance is mostly the VMs'; the user
    # bootstrap carries the sampling noise; the replay is the evaluation's main cost (docs/evaluation.md)
    share_replay: bool = True
    tail_hours: float = Field(24, gt=0)
    eval_hours: float = Field(24, gt=0)
    step_hours: float = Field(1, gt=0)
    finetune_batch_size: int = Field(256, ge=1)  # VM variants are fine-tuned on the tail (a few thousand rows)
    # a twentieth of the pre-training rate (model.training.learning_rate): a fine-tune refines the warm
    # start, it does not retrain every weight from it. Why this rate: the fine-tune must not add seed
    # variance to the VMs it starts from (the measurement behind it: docs/evaluation.md, "Seed spread")
    finetune_learning_rate: float = Field(1e-4, gt=0)
    output: str = "evaluation"  # folder under the warehouse: one sub-folder per evaluation
    t0s: tuple[datetime, ...] = ()  # windows' T0s when --as-of is not given; none: the densest windows
    windows: int = Field(2, ge=1)  # how many non-overlapping windows to pick when no T0 is given
    min_requests: int = Field(5000, ge=1)  # per window: scored requests below this are refused
    min_users: int = Field(200, ge=1)  # per window: distinct requesting users below this are refused
    min_training_events: int = Field(10_000, ge=1)  # per window: events up to the FM cutoff
    bootstrap_resamples: int = Field(1000, ge=1)  # user-bootstrap resamples for the 95 % intervals
    confidence: float = Field(0.95, gt=0, lt=1)
    freshness: FreshnessConfig = FreshnessConfig()

    @field_validator("t0s")
    @classmethod
    def _utc_t0s(cls, values: tuple[datetime, ...]) -> tuple[datetime, ...]:
        return tuple(v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc)
                     for v in values)


class FastLaneConfig(_Strict):
    """The sub-hourly fast lane (``solaris fast-lane``, DAG ``solaris_fast_lane``) for new sessions.

    Why: users rate in bursts, and a user whose first events (or first after a long absence) arrive
    after the hourly run gets nothing but the item tier until the next hour. Every
    ``interval_minutes`` the fast lane picks the users with an event in the last
    ``lookback_minutes`` and none in the ``absence_hours`` before that window, and runs candidates
    -> score -> publish for them only, within the ``max_users`` and ``per_user`` budgets.
    """

    interval_minutes: int = Field(15, ge=1, le=30)  # schedule: every interval past the hour (the hourly owns :00)
    lookback_minutes: int = Field(15, ge=1)  # a fast-lane user has >= 1 event in (as_of - lookback, as_of]
    absence_hours: float = Field(168, gt=0)  # ...and none in the absence_hours before that window
    max_users: int = Field(2000, ge=1)  # users per run (most events in the window first)
    per_user: int = Field(50, ge=1)  # candidates per fast-lane user (precompute.candidates.per_user for the lane)

    @model_validator(mode="after")
    def _divides_the_hour(self) -> "FastLaneConfig":
        if 60 % self.interval_minutes:
            raise ValueError("interval_minutes must divide 60 (the lane runs at fixed minutes past each hour)")
        return self


class StreamConfig(_Strict):
    """The incremental precompute (``solaris stream``, DAG ``solaris_stream``): a Structured Streaming
    query over ``events`` that re-speculates, scores and publishes the users of each micro-batch.

    Why: an FM value loses most of its edge over the real-time VM within minutes (issue 70), and the
    hourly cycle serves values half an hour old on median. ``schedule`` is the Airflow cron of the
    ``available-now`` runs; ``interval_seconds`` the trigger of a long-running ``processing-time`` query.
    """

    schedule: str = Field("*/5 * * * *", min_length=9)  # cron of DAG solaris_stream (an available-now run each)
    interval_seconds: int = Field(60, ge=1)  # processing-time trigger: a micro-batch at most this often
    # Delta's maxFilesPerTrigger: new events files per micro-batch (an available-now run splits a backlog)
    max_files_per_trigger: int = Field(100, ge=1)
    checkpoint_dir: str = "streams/precompute"  # under the warehouse: Spark's checkpoint and the start version


class SolarisConfig(_Strict):
    warehouse: Path = Path("warehouse")
    seed: int = 42
    spark: SparkConfig = SparkConfig()
    storage: StorageConfig = StorageConfig()
    tables: TablesConfig = TablesConfig()
    ingest: IngestConfig = IngestConfig()
    synthetic: SyntheticConfig = SyntheticConfig()
    model: ModelConfig = ModelConfig()
    precompute: PrecomputeConfig = PrecomputeConfig()
    enrichment: EnrichmentConfig = EnrichmentConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    fast_lane: FastLaneConfig = FastLaneConfig()
    stream: StreamConfig = StreamConfig()
    retention: RetentionConfig = RetentionConfig()

    @model_validator(mode="after")
    def _retention_covers_readers(self) -> "SolarisConfig":
        problems = retention_shortfalls(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def table_path(self, name: str) -> str:
        """Absolute path of a Delta table given its logical name (a field of ``tables``)."""
        folder = getattr(self.tables, name)
        return str(self.warehouse / folder)

    def resolve_under_warehouse(self, path: str | os.PathLike) -> Path:
        """Resolve a user-supplied path and refuse anything outside the warehouse root.

        Params from the Airflow UI and CLI flags end up as file paths; confining them keeps a
        typo or a hostile ``../..`` from reading or deleting outside the project's data.
        """
        root = self.warehouse.resolve()
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = root / candidate
        resolved = candidate.resolve()
        if resolved != root and root not in resolved.parents:
            raise ConfigError(f"path {str(path)!r} escapes the warehouse root {str(root)!r}")
        return resolved


def retention_shortfalls(config: SolarisConfig) -> list[str]:
    """Each retention of ``config.retention`` shorter than what a reader of its table needs (why each
    reader needs it: :class:`RetentionConfig`), as a message naming both keys; empty when none is."""
    keep, enrichment, evaluation = config.retention, config.enrichment, config.evaluation
    problems = []
    window_key, window = max((("enrichment.window_hours", enrichment.window_hours),
                              ("enrichment.item_window_hours", enrichment.item_window_hours)), key=lambda kv: kv[1])
    if keep.pair_embeddings_log_hours < window:
        problems.append(f"retention.pair_embeddings_log_hours ({keep.pair_embeddings_log_hours:g}) must be at least "
                        f"{window_key} ({window:g}): the aggregates read that window of the log")
    if keep.candidates_hours <= config.precompute.horizon_hours:
        problems.append(f"retention.candidates_hours ({keep.candidates_hours:g}) must exceed "
                        f"precompute.horizon_hours ({config.precompute.horizon_hours:g}): a run's hit rate is "
                        "measured once its horizon's requests are in")
    replayed = evaluation.tail_hours + evaluation.eval_hours
    if keep.runs_hours < replayed:
        problems.append(f"retention.runs_hours ({keep.runs_hours:g}) must be at least evaluation.tail_hours + "
                        f"evaluation.eval_hours ({replayed:g}): the evaluation reads the runs rows of its replay")
    return problems


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into a nested dict; values are parsed as YAML scalars."""
    nested: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        dotted, raw = item.split("=", 1)
        keys = [k.strip() for k in dotted.split(".")]
        if not all(keys):
            raise ConfigError(f"override {item!r} has an empty key")
        node = nested
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with another override")
        node[keys[-1]] = yaml.safe_load(raw) if raw != "" else ""
    return nested


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _format_errors(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "<root>"
        lines.append(f"  {key}: {item['msg']}")
    return "invalid configuration:\n" + "\n".join(lines)


def default_config_file() -> Traversable:
    """The packaged default config (``conf/solaris.yaml`` in the checkout)."""
    return files(CONFIG_PACKAGE) / CONFIG_FILE


def base_dir_for(config_file: Traversable | os.PathLike | str, explicit: bool) -> Path:
    """The folder relative config paths are resolved against (order in the module docstring)."""
    if os.environ.get(HOME_ENV_VAR):
        return Path(os.environ[HOME_ENV_VAR]).expanduser().resolve()
    if explicit:
        return Path(config_file).resolve().parent.parent  # type: ignore[arg-type]  # explicit: a file path
    if isinstance(config_file, Path):
        root = config_file.resolve().parent.parent
        if config_file.parent.name == "conf" and (root / "setup.py").is_file():
            return root  # source checkout (editable install)
    return Path.cwd().resolve()


def config_from_dict(data: dict[str, Any], base_dir: Path | None = None) -> SolarisConfig:
    """Validate a raw mapping; relative warehouse / jars paths are anchored at ``base_dir``.

    ``base_dir`` defaults to where the packaged default config anchors them (:func:`base_dir_for`).
    """
    if base_dir is None:
        base_dir = base_dir_for(default_config_file(), explicit=False)
    try:
        config = SolarisConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_errors(error)) from None
    warehouse = config.warehouse if config.warehouse.is_absolute() else base_dir / config.warehouse
    jars = Path(config.spark.jars_dir)
    jars = jars if jars.is_absolute() else base_dir / jars
    spark_paths = {"jars_dir": str(jars.resolve())}
    if config.spark.class_data_archive:
        archive = Path(config.spark.class_data_archive)
        # not resolve(): set-up makes the file a symlink into its cache, and the JVM follows it itself
        spark_paths["class_data_archive"] = str(archive if archive.is_absolute() else base_dir / archive)
    return config.model_copy(
        update={
            "warehouse": warehouse.resolve(),
            "spark": config.spark.model_copy(update=spark_paths),
        }
    )


def load_config(path: str | os.PathLike | None = None, overrides: Iterable[str] = ()) -> SolarisConfig:
    """Load and validate the YAML config, then apply ``key.path=value`` overrides.

    The file is taken from ``path``, else ``$SOLARIS_CONFIG``, else the packaged default
    (``conf/solaris.yaml``); keys it leaves out keep the field defaults. ``$SOLARIS_WAREHOUSE``, when
    set, replaces its ``warehouse`` (explicit overrides still win). Relative paths are resolved as
    the module docstring says (``$SOLARIS_HOME``, else the folder above an explicit file's folder,
    else the checkout's root or, installed, the working directory), so jobs launched from a
    checkout behave the same whatever their working directory (spark-submit, Airflow workers).
    """
    explicit = path or os.environ.get(CONFIG_ENV_VAR)
    config_path: Traversable | Path = Path(explicit) if explicit else default_config_file()
    if not config_path.is_file():
        raise ConfigError(f"config file not found: {config_path}")
    try:
        raw = yaml.safe_load(config_path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {config_path} is not valid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {config_path} must hold a mapping at the top level")
    if os.environ.get(WAREHOUSE_ENV_VAR):
        raw = {**raw, "warehouse": os.environ[WAREHOUSE_ENV_VAR]}
    merged = _deep_merge(raw, parse_overrides(overrides))
    return config_from_dict(merged, base_dir=base_dir_for(config_path, explicit=bool(explicit)))
