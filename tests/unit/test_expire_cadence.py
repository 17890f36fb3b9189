"""When the scheduled expire VACUUMs: a pure function of the as-of, and the CLI flags that override it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from solaris.jobs.expire import build_parser
from solaris.stages.expire import is_vacuum_hour

MIDNIGHT = datetime(2000, 12, 1, tzinfo=timezone.utc)


def test_daily_cadence_vacuums_only_at_the_midnight_run():
    hours = [MIDNIGHT + timedelta(hours=h) for h in range(48)]
    assert [t for t in hours if is_vacuum_hour(t, 24)] == [MIDNIGHT, MIDNIGHT + timedelta(days=1)]
    assert all(is_vacuum_hour(t, 1) for t in hours)  # 1: every hour, as before
    assert [t.hour for t in hours[:24] if is_vacuum_hour(t, 6)] == [0, 6, 12, 18]


@pytest.mark.parametrize(("flags", "vacuum"), [([], None), (["--vacuum"], True), (["--no-vacuum"], False)])
def test_flags_force_or_skip_the_vacuum_and_default_to_the_cadence(flags, vacuum):
    args = build_parser().parse_args(["--as-of", "2000-12-01T05:00:00Z", *flags])
    assert args.vacuum is vacuum


def test_vacuum_and_no_vacuum_together_are_refused():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--as-of", "2000-12-01T05:00:00Z", "--vacuum", "--no-vacuum"])
