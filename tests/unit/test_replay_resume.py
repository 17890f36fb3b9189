"""A replay resumes where it stopped: which ticks are done is read once, from ``runs``, without Spark.

The runs table is written as the stages write it (:meth:`solaris.storage.audit.RunsLog.write`, with
``deltalake``); the rule is a ``success`` row of the tick's last stage (coverage) under the tick's
enrichment run id. The replay itself, resumed through ``solaris evaluate``, is in
``tests/integration/test_evaluate.py`` (a second seed sharing the replay runs no tick).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from solaris.config import SolarisConfig
from solaris.drivers.replay import _done_ticks
from solaris.pipeline import LAST_MEASURE, run_ids
from solaris.storage.audit import RunsLog

T0 = datetime(2000, 12, 1, tzinfo=timezone.utc)


def _row(run_id: str, job: str, status: str) -> tuple:
    return (run_id, job, T0, T0, T0, 0, 0, 0, status, {}, "{}")


def test_done_ticks_are_the_successful_coverage_rows_of_the_asked_ticks(tmp_path) -> None:
    config = SolarisConfig(warehouse=tmp_path)
    ticks = [run_ids(T0 + timedelta(hours=h))["enrichment"] for h in range(4)]
    assert _done_ticks(None, config, set(ticks)) == set()  # type: ignore[arg-type]  # no runs table yet
    RunsLog.of(None, config).write([  # deltalake writes it: no Spark
        _row(ticks[0], LAST_MEASURE, "success"),
        _row(ticks[1], "publish", "success"),  # the tick stopped before its last stage
        _row(ticks[2], LAST_MEASURE, "refused"),
        _row(ticks[3], LAST_MEASURE, "success"),
        _row("enrichment-other", LAST_MEASURE, "success"),  # not a tick of this schedule
    ])
    assert _done_ticks(None, config, set(ticks)) == {ticks[0], ticks[3]}  # type: ignore[arg-type]
