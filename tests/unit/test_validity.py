"""The time rules of served values (solaris.storage.validity): every spelling says the same thing."""

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from solaris.storage.validity import expired_predicate, expires_at, is_servable, servable_filter, servable_mask

COMPUTED = datetime(2026, 3, 31, 22, 30, tzinfo=timezone.utc)


def test_expiry_across_a_day_boundary():
    assert expires_at(COMPUTED, 6) == datetime(2026, 4, 1, 4, 30, tzinfo=timezone.utc)


def test_servable_from_computed_at_up_to_but_excluding_expires_at():
    expiry = expires_at(COMPUTED, 6)
    assert is_servable(COMPUTED, COMPUTED, expiry)  # a run at the computing hour sees its own values
    assert is_servable(expiry - timedelta(seconds=1), COMPUTED, expiry)
    assert not is_servable(expiry, COMPUTED, expiry)  # at expires_at exactly it is already expired
    assert not is_servable(COMPUTED - timedelta(seconds=1), COMPUTED, expiry)  # computed after the run's hour
    assert is_servable(COMPUTED.replace(tzinfo=None), COMPUTED, expiry)  # naive times are UTC


def _times() -> tuple[list[datetime], list[datetime], list[datetime]]:
    """Every order of as-of against computed_at and expires_at, including both boundaries."""
    expiry = expires_at(COMPUTED, 6)
    offsets = [-3600, -1, 0, 1, 3 * 3600, 6 * 3600 - 1, 6 * 3600, 6 * 3600 + 1]
    nows = [COMPUTED + timedelta(seconds=s) for s in offsets]
    return nows, [COMPUTED] * len(nows), [expiry] * len(nows)


def test_numpy_and_arrow_spellings_agree_with_the_scalar_rule():
    nows, computed, expiry = _times()
    expected = [is_servable(n, c, e) for n, c, e in zip(nows, computed, expiry)]
    assert expected.count(True) == 4  # offsets 0 s, 1 s, 3 h, 6 h - 1 s
    seconds = lambda values: np.array([v.timestamp() for v in values])  # noqa: E731
    assert servable_mask(seconds(nows), seconds(computed), seconds(expiry)).tolist() == expected
    table = pa.table({"computed_at": pa.array(computed, pa.timestamp("us", tz="UTC")),
                      "expires_at": pa.array(expiry, pa.timestamp("us", tz="UTC"))})
    for now, servable in zip(nows, expected):
        kept = ds.dataset(table).to_table(filter=servable_filter(now)).num_rows
        assert kept == (len(nows) if servable else 0), now


def test_expired_predicate_is_the_complement_at_the_cutoff():
    assert expired_predicate("TIMESTAMP '2026-04-01 04:30:00'") == "expires_at <= TIMESTAMP '2026-04-01 04:30:00'"
