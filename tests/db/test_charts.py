"""ops.charts, the dashboard's reads per stream, and the stream hours workers keep for them."""

from datetime import timedelta

import pytest

from outbox.core import charts as windows
from outbox.core.charts import Bucket
from outbox.core.status import Status
from outbox.models import utcnow
from outbox.ops import charts, rollups
from tests.support.rows import store

pytestmark = pytest.mark.all_databases


def ended(make_message, status: Status, at, took: float = 1.0, stream: str = "transactional",
          **more) -> int:  # type: ignore[no-untyped-def]  # fmt: skip
    """A message that ended (sent or failed) at `at`, queued `took` seconds before."""
    message = make_message(now=at - timedelta(seconds=took), **more)
    sent_at = at if status == Status.SENT else None
    store(message.id, Status.QUEUED, status=status.value, sent_at=sent_at, settled_at=at,
          stream=stream)  # fmt: skip
    return int(message.id)


def by_start(chart) -> dict:  # type: ignore[no-untyped-def]
    return {b.start: b for b in chart.buckets if b.sent or b.failed}


def test_the_last_hour_counts_each_stream_per_five_minutes(app, make_message):
    now = utcnow()
    w = windows.WINDOWS["1h"]
    last = windows.floor(now, w.bucket)
    for took in (1.0, 2.0, 3.0, 4.0):
        ended(make_message, Status.SENT, last, took)
    ended(make_message, Status.FAILED, last)
    ended(make_message, Status.SENT, last - timedelta(minutes=5), 0.5, stream="broadcast")
    ended(make_message, Status.SENT, now - timedelta(hours=2))  # before the window
    found = charts.per_stream(w, now)
    assert [c.stream for c in found.charts] == ["transactional", "broadcast"]
    assert not found.capped
    transactional, broadcast = found.charts
    assert len(transactional.buckets) == 12
    assert by_start(transactional) == {last: Bucket(last, 4, 1, 2.0, 4.0)}
    before = last - timedelta(minutes=5)
    assert by_start(broadcast) == {before: Bucket(before, 1, 0, 0.5, 0.5)}


def test_settled_hours_are_kept_per_stream_once_and_read_from_there(app, make_message):
    now = utcnow()
    w = windows.WINDOWS["7d"]
    hour = windows.floor(now - timedelta(hours=5), timedelta(hours=1))
    ended(make_message, Status.SENT, hour + timedelta(minutes=1), 2.0)
    ended(make_message, Status.SENT, hour + timedelta(minutes=2), 4.0)
    late = ended(make_message, Status.FAILED, hour + timedelta(minutes=3), stream="broadcast")
    ended(make_message, Status.SENT, now - timedelta(days=3), 8.0, stream="broadcast")
    counted = charts.per_stream(w, now)  # before any worker kept an hour: counted live
    settled = [h for h in rollups.stream_hours(now) if h < rollups.settled_before(now)]
    kept = 0
    while made := rollups.roll_up_stream_hours(now):  # a few hours each time, oldest first
        assert made <= rollups.STREAM_HOURS_AT_ONCE
        kept += made
        assert charts.per_stream(w, now) == counted  # part kept, part counted: the same
    assert kept == len(settled)  # each hour is kept once
    assert charts.per_stream(w, now) == counted
    transactional, broadcast = counted.charts
    assert by_start(transactional) == {hour: Bucket(hour, 2, 0, 2.0, 4.0)}
    assert by_start(broadcast)[hour] == Bucket(hour, 0, 1)
    # A kept hour is read from stream_hours, not from the messages.
    store(late, Status.FAILED, stream="transactional")
    assert charts.per_stream(w, now) == counted
    day = windows.floor(now - timedelta(hours=23), timedelta(hours=1))
    assert charts.per_stream(windows.WINDOWS["24h"], now).charts[0].buckets[0].start == day


def test_past_the_cap_a_chart_counts_the_latest_and_says_so(app, make_message, monkeypatch):
    monkeypatch.setattr(charts, "LIVE_CAP", 2)
    now = utcnow()
    for minutes in (1, 2, 3):
        ended(make_message, Status.SENT, now - timedelta(minutes=minutes))
    found = charts.per_stream(windows.WINDOWS["1h"], now)
    assert found.capped
    assert found.charts[0].sent == 2


def test_the_last_days_failures_are_grouped_by_codes_and_recipient_domain(app, make_message):
    now = utcnow()
    errors = {
        "550 5.1.1 <a@one.example>: user unknown": ["a@one.example"],
        "550 5.1.1 <b@one.example>: user unknown": ["b@one.example", "c@Two.example"],
        "421 4.7.0 try again later": ["d@two.example"],
    }
    for error, to in errors.items():
        pk = ended(make_message, Status.FAILED, now - timedelta(minutes=5), to=to)
        store(pk, Status.FAILED, last_error=error)
    old = ended(make_message, Status.FAILED, now - timedelta(days=2), to=["x@old.example"])
    store(old, Status.FAILED, last_error="554 5.7.1 spam")
    ended(make_message, Status.SENT, now - timedelta(minutes=5), to=["y@sent.example"])
    found = charts.failures(now)
    assert (found.count, found.capped) == (3, False)
    assert found.reasons == [("550 5.1.1", 2), ("421 4.7.0", 1)]
    assert found.domains == [("one.example", 2), ("two.example", 2)]
    assert charts.failures(now, top=1).domains == [("one.example", 2)]


def test_in_hand_counts_the_messages_each_worker_is_sending_per_stream(app, make_message):
    for worker, stream in (("w1", "transactional"), ("w1", "broadcast"), ("w1", "broadcast"),
                           ("w2", "transactional")):  # fmt: skip
        message = make_message()
        store(message.id, Status.QUEUED, status=Status.SENDING.value, locked_by=worker,
              locked_at=utcnow(), stream=stream)  # fmt: skip
    make_message()  # queued: in no worker's hand
    assert charts.in_hand() == {"w1": {"transactional": 1, "broadcast": 2},
                                "w2": {"transactional": 1}}  # fmt: skip
