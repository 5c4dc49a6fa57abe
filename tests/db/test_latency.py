"""reports.latency, the dashboard's queue-to-250 of the last hour: what it is made of."""

from datetime import timedelta

import pytest

from outbox.core import latency
from outbox.core.status import Status
from outbox.models import utcnow
from outbox.ops import reports
from tests.support.rows import store

pytestmark = pytest.mark.all_databases


def sent(make_message, took: float, ago: timedelta = timedelta(minutes=1)) -> int:  # type: ignore[no-untyped-def]
    """A message sent `ago`, `took` seconds after it was queued."""
    at = utcnow() - ago
    message = make_message(now=at - timedelta(seconds=took))
    store(message.id, Status.QUEUED, status=Status.SENT.value, sent_at=at, settled_at=at)
    return int(message.id)


def test_the_figures_are_of_the_messages_sent_in_the_window(app, make_message):
    now = utcnow()
    assert reports.latency(now - timedelta(hours=1)) == reports.Latency(None, None, 0, False)
    for n in range(1, 21):  # 0.01 s to 0.2 s
        sent(make_message, n / 100)
    sent(make_message, 3600.0, ago=timedelta(hours=2))  # before the window
    failed = make_message(now=now - timedelta(minutes=3))
    store(failed.id, Status.QUEUED, status=Status.FAILED.value, settled_at=now)  # never sent
    found = reports.latency(now - timedelta(hours=1))
    assert (found.count, found.capped) == (20, False)
    assert found.p50 == pytest.approx(0.10, abs=1e-3)
    assert found.p95 == pytest.approx(0.19, abs=1e-3)


def test_a_busy_hour_is_read_up_to_the_cap_latest_first(app, make_message, monkeypatch):
    monkeypatch.setattr(reports, "LATENCY_SAMPLE", 3)
    for n, took in enumerate((9.0, 9.0, 0.5, 0.5, 0.5)):
        sent(make_message, took, ago=timedelta(minutes=10 - n))
    found = reports.latency(utcnow() - timedelta(hours=1))
    assert (found.count, found.capped, found.p50, found.p95) == (3, True, 0.5, 0.5)


def test_the_database_picks_the_nearest_ranks_that_the_quantiles_name(app, make_message):
    """The ranks are found by sorting in SQL: the same figures as core.latency.quantile."""
    took = [(n * 7919 % 97) / 8 + n / 1000 for n in range(1, 38)]  # 37 distinct, unsorted
    took += [took[3], took[3]]  # and ties
    for seconds in took:
        sent(make_message, seconds)
    found = reports.latency(utcnow() - timedelta(hours=1))
    assert found.count == len(took)
    assert found.p50 == pytest.approx(latency.quantile(took, 0.5), abs=1e-3)
    assert found.p95 == pytest.approx(latency.quantile(took, 0.95), abs=1e-3)
    assert found.p50 != found.p95
