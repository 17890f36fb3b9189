"""The Jinja templates the DAGs use for as-of, rendered with the context shapes Airflow 3 passes."""

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import jinja2
import pytest

from solaris.orchestration import (
    AS_OF_PATTERN,
    AS_OF_TEMPLATE,
    ASSET_AS_OF_TEMPLATE,
    events_arrived,
    spark_submit_kwargs,
    tick_has_events,
)


def _render(template, **context):
    context.setdefault("params", {"as_of": None})
    context.setdefault("logical_date", None)
    context.setdefault("dag_run", SimpleNamespace(run_after=datetime(2026, 3, 1, 7, tzinfo=timezone.utc)))
    return jinja2.Environment().from_string(template).render(**context)


def test_as_of_param_wins_then_logical_date_then_run_after():
    assert _render(AS_OF_TEMPLATE, params={"as_of": "2000-12-01T00:00:00Z"}) == "2000-12-01T00:00:00Z"
    assert _render(AS_OF_TEMPLATE, logical_date=datetime(2026, 1, 2, 3, tzinfo=timezone.utc)) == "2026-01-02T03:00:00Z"
    assert _render(AS_OF_TEMPLATE) == "2026-03-01T07:00:00Z"


def test_asset_triggered_runs_take_the_as_of_from_the_latest_event_extra():
    events = {"solaris://pair_embeddings": [SimpleNamespace(extra={"as_of": "2000-12-01T01:00:00Z"}),
                                            SimpleNamespace(extra={"as_of": "2000-12-01T02:00:00Z"})]}
    assert _render(ASSET_AS_OF_TEMPLATE, triggering_asset_events=events) == "2000-12-01T02:00:00Z"
    assert _render(ASSET_AS_OF_TEMPLATE, triggering_asset_events={}) == "2026-03-01T07:00:00Z"


@pytest.mark.parametrize(
    "value,ok",
    [
        ("2000-12-01T00:00:00Z", True),
        ("2000-12-01 00:00", True),
        ("2000-12-01T00:00:00+02:00", True),
        ("2000-12-01T00:00:00.000Z", True),  # what the trigger form's date-time picker sends
        ("yesterday", False),
        ("2000-12-01", False),
    ],
)
def test_as_of_pattern(value, ok):
    import re

    assert bool(re.match(AS_OF_PATTERN, value)) is ok


def test_spark_submit_kwargs_point_at_job_files_and_jars():
    kwargs = spark_submit_kwargs("score", ["--as-of", "x"])
    assert kwargs["application"].endswith("jobs/score.py") and "delta-spark_" in kwargs["jars"]
    assert kwargs["conn_id"] == "spark_default" and kwargs["env_vars"]["TZ"] == "UTC"
    # spark-submit starts the driver JVM, so its options go on the command line; C1 only for one stage
    java = kwargs["conf"]["spark.driver.extraJavaOptions"].split()
    assert "-Duser.timezone=UTC" in java and "-XX:TieredStopAtLevel=1" not in java
    assert "-XX:TieredStopAtLevel=1" in spark_submit_kwargs("score", [], one_stage=True)["conf"][
        "spark.driver.extraJavaOptions"].split()
    with pytest.raises(FileNotFoundError):
        spark_submit_kwargs("nope", [])


def test_job_entry_files_come_from_the_installed_jobs_package():
    from pathlib import Path

    import solaris.jobs
    from solaris.orchestration import job_application

    assert Path(job_application("candidates")) == Path(solaris.jobs.__file__).parent / "candidates.py"
    with pytest.raises(FileNotFoundError):
        job_application("../setup")


def test_only_params_changed_from_the_config_default_become_set_flags():
    from solaris.orchestration import ConfigParams, changed_overrides

    config = ConfigParams(ttl_hours="precompute.ttl_hours", threshold="precompute.verifier.threshold")
    assert config.defaults == {"ttl_hours": 6, "threshold": 0.5}
    assert changed_overrides({"ttl_hours": 6, "threshold": 0.5}, config.args().overrides) == []
    assert changed_overrides({"ttl_hours": 3, "threshold": None}, config.args().overrides) == [
        "--set", "precompute.ttl_hours=3", "--set", "precompute.verifier.threshold=null"]
    assert config.args(params=["ttl_hours"]).overrides == {"ttl_hours": ("precompute.ttl_hours", 6)}
    param = config.param(lambda default, **schema: (default, schema), "ttl_hours", "TTL", type="number")
    assert param == (6, {"description": "TTL (default: config precompute.ttl_hours)", "type": "number"})


def test_spark_args_render_their_templates_then_append_the_changed_overrides():
    from solaris.orchestration import ConfigParams

    args = ConfigParams(ttl_hours="precompute.ttl_hours").args("--as-of", AS_OF_TEMPLATE)
    task = SimpleNamespace(render_template=lambda value, context: [_render(item, **context) for item in value])
    context = {"params": {"as_of": "2000-12-01T00:00:00Z", "ttl_hours": 6}, "task": task}
    assert args.resolve(context) == ["--as-of", "2000-12-01T00:00:00Z"]
    context["params"]["ttl_hours"] = 2.5
    assert args.resolve(context) == ["--as-of", "2000-12-01T00:00:00Z", "--set", "precompute.ttl_hours=2.5"]
    assert list(args) == ["--as-of", AS_OF_TEMPLATE]  # the unrendered value is unchanged


def test_a_tick_runs_when_the_events_reach_its_window_and_is_skipped_when_they_end_before_it():
    as_of, hour = datetime(2026, 3, 1, 7, tzinfo=timezone.utc), timedelta(hours=1)
    assert tick_has_events(as_of - timedelta(minutes=1), as_of, hour)
    assert tick_has_events(as_of - hour, as_of, hour)  # an event at the window's start counts
    assert tick_has_events(as_of + hour, as_of, hour)  # a replayed past hour: later events exist
    assert not tick_has_events(as_of - hour - timedelta(seconds=1), as_of, hour)
    assert tick_has_events(None, as_of, hour)  # unknown: never skipped, the jobs decide


def test_events_arrived_reads_the_configured_events_table_log(tmp_path, monkeypatch):
    """On a real Delta table (written with deltalake: no JVM) in the warehouse the config points at."""
    import pyarrow as pa
    from deltalake import write_deltalake

    monkeypatch.setenv("SOLARIS_WAREHOUSE", str(tmp_path))
    assert events_arrived("2026-03-01T07:00:00Z", window_minutes=60)  # no table: left to the jobs
    times = pa.array([datetime(2026, 3, 1, 5, 30, tzinfo=timezone.utc)], pa.timestamp("us", tz="UTC"))
    write_deltalake(str(tmp_path / "events"), pa.table({"user_id": [1], "item_id": [2], "ts": times}))
    assert events_arrived("2026-03-01T06:00:00Z", window_minutes=60)
    assert events_arrived("1998-03-01T02:00:00.000Z", window_minutes=60)
    assert not events_arrived("2026-03-01T07:00:00Z", window_minutes=60)
    assert events_arrived("2026-03-01T07:00:00Z", window_minutes=120)
