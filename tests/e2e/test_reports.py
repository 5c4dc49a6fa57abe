"""The dashboard's figures: the hourly chart (settled hours kept in attempt_hours by the
workers, the rest counted live) and the workers' full counts per status."""

import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import delete, event, func, select

from outbox import queue, worker
from outbox.core.status import Status
from outbox.models import Attempt, AttemptHour, StatusCount, utcnow
from outbox.models.db import db
from outbox.ops import reports, rollups
from outbox.worker import runner

NOW = datetime(2030, 1, 10, 12, 10, 0)  # ten minutes into an hour: the last one not yet settled
OUTCOMES = ["sent", "sent", "sent", "failed", "deferred", "worker_lost"]


@pytest.fixture
def message_pk(make_message) -> int:  # type: ignore[no-untyped-def]
    return make_message(now=NOW - timedelta(days=2)).id


def add_attempts(message_pk: int, moments: list[tuple[datetime, str]]) -> None:
    db.session.add_all(
        Attempt(message_pk=message_pk, started_at=at - timedelta(seconds=1), finished_at=at,
                worker_id="w1", outcome=outcome)
        for at, outcome in moments
    )  # fmt: skip
    db.session.commit()


def spread(since: datetime, until: datetime, step: timedelta) -> list[tuple[datetime, str]]:
    """Attempts every step from since to until, cycling through the outcomes."""
    found, at, n = [], since, 0
    while at < until:
        found.append((at, OUTCOMES[n % len(OUTCOMES)]))
        at, n = at + step, n + 1
    return found


def by_hour(now: datetime) -> list[tuple[datetime, int, int]]:
    """The 24 hours up to now straight from every attempt row, bucketed here, not in SQL."""
    tally: Counter[tuple[datetime, str]] = Counter()
    for finished_at, outcome in db.session.execute(select(Attempt.finished_at, Attempt.outcome)):
        tally[(finished_at.replace(minute=0, second=0, microsecond=0), outcome)] += 1
    db.session.commit()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    hours = [this_hour - timedelta(hours=n) for n in range(23, -1, -1)]
    return [(h, tally[(h, "sent")], tally[(h, "failed")]) for h in hours]


def chart(now: datetime) -> list[tuple[datetime, int, int]]:
    """The dashboard's chart after a worker has kept the settled hours, as workers do."""
    rollups.roll_up_hours(now)
    return view(now)


def view(now: datetime) -> list[tuple[datetime, int, int]]:
    """The dashboard's chart as it reads, with whatever hours are kept."""
    found = [(h.start, h.sent, h.failed) for h in reports.hourly(now)]
    db.session.commit()
    return found


def kept() -> dict[datetime, tuple[int, int]]:
    rows = db.session.scalars(select(AttemptHour).order_by(AttemptHour.hour_at)).all()
    db.session.commit()
    return {r.hour_at: (r.sent, r.failed) for r in rows}


def test_an_hour_settles_lock_timeout_record_after_and_a_minute_after_its_end(app):
    app.config.update(LOCK_TIMEOUT=900.0, RECORD_AFTER=5.0)
    assert rollups.settled_before(datetime(2030, 1, 10, 12, 16, 4)) == datetime(2030, 1, 10, 11)
    assert rollups.settled_before(datetime(2030, 1, 10, 12, 16, 5)) == datetime(2030, 1, 10, 12)


@pytest.mark.all_databases
def test_chart_equals_a_direct_count_as_hours_settle_and_more_attempts_arrive(app, message_pk):
    # Two days of attempts every 7 minutes 13 seconds, with some on the hour boundaries.
    add_attempts(message_pk, spread(NOW - timedelta(days=2), NOW, timedelta(minutes=7, seconds=13)))
    edges = [datetime(2030, 1, 10, 9), datetime(2030, 1, 10, 9, 59, 59, 999999)]
    add_attempts(message_pk, [(edges[0], "sent"), (edges[1], "failed")])
    assert chart(NOW) == by_hour(NOW)
    # At 12:10 the hours before 11:00 are settled (LOCK_TIMEOUT 900 s and more): 22 kept.
    first = datetime(2030, 1, 9, 13)
    assert sorted(kept()) == [first + timedelta(hours=n) for n in range(22)]
    assert [kept()[h] for h, _, _ in by_hour(NOW)[:22]] == [(s, f) for _, s, f in by_hour(NOW)[:22]]

    # A late outcome of the open 11:00 hour, and more in the current one, after the first view.
    add_attempts(message_pk, [(datetime(2030, 1, 10, 11, 59, 59), "sent"),
                              (datetime(2030, 1, 10, 12, 9), "failed")])  # fmt: skip
    assert chart(NOW) == by_hour(NOW)
    later = NOW + timedelta(minutes=10)  # 12:20: now 11:00 settles and is kept with the late one
    add_attempts(message_pk, [(datetime(2030, 1, 10, 12, 19), "sent")])
    assert chart(later) == by_hour(later)
    assert kept()[datetime(2030, 1, 10, 11)] == by_hour(later)[-2][1:]
    assert datetime(2030, 1, 10, 12) not in kept()

    next_day = NOW + timedelta(hours=25)  # 13:10 the next day: from 14:00 on, 22 more hours
    add_attempts(message_pk, spread(NOW + timedelta(minutes=20), next_day, timedelta(minutes=11)))
    assert chart(next_day) == by_hour(next_day)
    hours = [first + timedelta(hours=n) for n in range(23 + 2 + 22)]
    assert sorted(kept()) == hours[:23] + hours[25:]
    assert all(kept()[h] == (s, f) for h, s, f in by_hour(next_day)[:-2])


@pytest.mark.all_databases
def test_the_chart_counts_hours_no_worker_has_kept_yet_and_keeps_nothing(app, message_pk):
    add_attempts(message_pk, spread(NOW - timedelta(hours=30), NOW, timedelta(minutes=5)))
    assert view(NOW) == by_hour(NOW)
    assert kept() == {}


@pytest.mark.all_databases
def test_a_kept_hour_is_not_counted_again(app, message_pk):
    add_attempts(message_pk, spread(NOW - timedelta(hours=30), NOW, timedelta(minutes=5)))
    before = chart(NOW)
    assert before == by_hour(NOW)
    # An attempt that turns up in a settled hour (which workers never write) stays unseen:
    # the chart reads that hour from attempt_hours, not from the attempts.
    add_attempts(message_pk, [(datetime(2030, 1, 10, 5, 30), "sent")])
    assert chart(NOW) == before != by_hour(NOW)
    db.session.execute(delete(AttemptHour))
    db.session.commit()
    assert view(NOW) == by_hour(NOW)


@pytest.mark.all_databases
def test_an_hour_stored_twice_keeps_its_first_count(app, message_pk):
    hour = datetime(2030, 1, 10, 3)
    rollups.store_hours([rollups.Hour(hour, 5, 1)], NOW)
    rollups.store_hours([rollups.Hour(hour, 5, 1), rollups.Hour(hour + timedelta(hours=1), 2, 0)],
                         NOW)  # fmt: skip
    rollups.store_hours([rollups.Hour(hour, 7, 7)], NOW)
    assert kept() == {hour: (5, 1), hour + timedelta(hours=1): (2, 0)}


# `python -c` imports outbox from its working directory first: this checkout's, not
# whichever one the environment has installed.
CHECKOUT = Path(__file__).resolve().parents[2]
VIEWER = """
import sys, time
from datetime import datetime
from sqlalchemy import text
from outbox import create_app
from outbox.models.db import db
from outbox.ops import reports, rollups
url, start, now = sys.argv[1], float(sys.argv[2]), datetime.fromisoformat(sys.argv[3])
app = create_app({"DATABASE_URL": url, "SECRET_KEY": "test"})
with app.app_context():
    db.session.execute(text("SELECT 1"))  # connected before the start
    db.session.commit()
    time.sleep(max(0.0, start - time.time()))
    rollups.roll_up_hours(now)
    hours = reports.hourly(now)
    print(sum(h.sent for h in hours), sum(h.failed for h in hours))
"""


@pytest.mark.all_databases
def test_workers_rolling_up_at_once_keep_each_hour_once(app, message_pk):
    add_attempts(message_pk, spread(NOW - timedelta(hours=30), NOW, timedelta(minutes=3)))
    expected = by_hour(NOW)
    start = time.time() + 3
    url = app.config["DATABASE_URL"]
    viewers = [
        subprocess.Popen([sys.executable, "-c", VIEWER, url, str(start), NOW.isoformat()],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=CHECKOUT)
        for _ in range(4)
    ]  # fmt: skip
    answers = [v.communicate(timeout=120) for v in viewers]
    assert [v.returncode for v in viewers] == [0] * 4, answers
    totals = f"{sum(s for _, s, _ in expected)} {sum(f for _, _, f in expected)}"
    assert [out.strip() for out, _ in answers] == [totals] * 4
    assert kept() == {h: (s, f) for h, s, f in expected[:22]}
    assert chart(NOW) == expected


@pytest.mark.all_databases
def test_a_dashboard_view_reads_attempts_of_the_unsettled_hours_only(signed_in, message_pk):
    now = utcnow()
    add_attempts(message_pk, spread(now - timedelta(hours=30), now, timedelta(minutes=10)))
    rollups.roll_up_hours(now)  # as a worker does every COUNT_INTERVAL
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        seen.append((" ".join(statement.split()), parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        assert signed_in.get("/").status_code == 200
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert not [sql for sql, _ in seen if sql.split()[0] in ("INSERT", "UPDATE", "DELETE")]
    reads = [params for sql, params in seen if "FROM attempts" in sql]
    assert len(reads) == 1
    values = reads[0].values() if isinstance(reads[0], dict) else reads[0]
    (bound,) = [v if isinstance(v, datetime) else datetime.fromisoformat(v)
                for v in values if isinstance(v, datetime) or str(v)[:2] == "20"]  # fmt: skip
    assert bound >= rollups.settled_before(now) >= now - timedelta(hours=2)
    # Every count on the page is of one status, capped: the tiles have no "all".
    counts = [sql for sql, _ in seen if sql.startswith("SELECT count(*)")]
    assert len(counts) == 6 and all("WHERE messages.status =" in sql for sql in counts)


@pytest.mark.all_databases
def test_a_full_count_is_due_when_missing_or_count_interval_old(app, make_message):
    app.config["COUNT_INTERVAL"] = 60.0
    assert rollups.counts_due(NOW)
    make_message()
    make_message()
    assert rollups.refresh_counts(NOW) == {"queued": 2}
    assert not rollups.counts_due(NOW + timedelta(seconds=59))
    assert rollups.counts_due(NOW + timedelta(seconds=60))


@pytest.mark.all_databases
def test_a_second_full_count_replaces_the_first(app, make_message):
    first = make_message()
    rollups.refresh_counts(NOW)
    queue.cancel(first.id)
    make_message()
    rollups.refresh_counts(NOW + timedelta(minutes=1))
    rows = db.session.execute(
        select(StatusCount.status, StatusCount.messages, StatusCount.counted_at)
    )
    found = {status: (messages, moment) for status, messages, moment in rows}
    db.session.commit()
    # Every status has its row, the ones with no messages too.
    assert set(found) == {status.value for status in Status}
    assert {s: n for s, (n, _) in found.items() if n} == {"queued": 1, "cancelled": 1}
    assert {moment for _, moment in found.values()} == {NOW + timedelta(minutes=1)}


def test_the_worker_counts_on_a_schedule_of_its_own(app, make_message):
    make_message()
    scheduler = BackgroundScheduler(timezone="UTC")
    runner.schedule(scheduler, app, worker.Worker())
    job = scheduler.get_job("counts")
    assert job.trigger.interval == timedelta(seconds=app.config["COUNT_INTERVAL"])
    job.func()
    with app.app_context():
        assert not rollups.counts_due(utcnow())
        assert reports.status_counts(cap=0)[Status.QUEUED.value] == reports.Count(
            1, True, db.session.scalar(select(func.min(StatusCount.counted_at)))
        )


@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_mariadb_reads_a_status_tab_and_the_failures_through_the_status_index(app, db_kind):
    """Left to itself MariaDB scans the primary key backwards for a status of ~1% of rows."""
    statements: list[str] = []

    def record(conn, cursor, statement, *rest):  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        reports.page("failed", None, None)
        reports.page("sent", "ann", None)
        reports.latest_failures()
        reports.page(None, None, None)
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    listed = [s for s in statements if "ORDER BY messages.id DESC" in s]
    assert len(listed) == 4
    assert all("FORCE INDEX (ix_messages_status_id)" in s for s in listed[:3])
    assert "FORCE INDEX" not in listed[3]  # all statuses: the primary key is the way
