"""The figures workers keep for the pages: full counts per status, settled hours of attempts,
and settled hours of messages ended per stream.

Workers write them (count_if_due); the pages only read them (reports), so a page
view writes nothing and costs the same whatever the tables hold.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from flask import current_app
from sqlalchemy import Table, func, literal_column, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from outbox.core import charts
from outbox.core.latency import in_ms, queue_to_sent
from outbox.core.status import Lease, Outcome, Status
from outbox.core.streams import Stream
from outbox.models import Attempt, AttemptHour, Message, StatusCount, StreamHour, utcnow
from outbox.models.db import db

log = logging.getLogger(__name__)

COUNTS = cast(Table, StatusCount.__table__)
HOURS = cast(Table, AttemptHour.__table__)
STREAM_HOURS = cast(Table, StreamHour.__table__)
# A worker's clock may run this far ahead of or behind another's or the web server's.
CLOCK_SKEW = timedelta(minutes=1)
CHART_HOURS = 24
STREAM_CHART_HOURS = 7 * 24  # the longest window of the charts per stream (core.charts)
# The hours per stream one roll-up counts at most, oldest first: a week not kept yet
# (a new install on a big table) is filled in over that many roll-ups, each reading a few
# hours of messages, never a week's at once; the page counts the rest meanwhile.
STREAM_HOURS_AT_ONCE = 6
ENDED = (Status.SENT.value, Status.FAILED.value)


@dataclass(frozen=True)
class Hour:
    start: datetime
    sent: int
    failed: int


def counts_due(now: datetime) -> bool:
    """Whether the full counts are missing or COUNT_INTERVAL old."""
    oldest = db.session.scalar(select(func.min(COUNTS.c.counted_at)))
    db.session.commit()
    interval = timedelta(seconds=current_app.config["COUNT_INTERVAL"])
    return oldest is None or oldest <= now - interval


def refresh_counts(now: datetime | None = None) -> dict[str, int]:
    """Count every status in full (one pass over ix_messages_status_id) and keep it."""
    now = now or utcnow()
    stmt = select(Message.status, func.count()).group_by(Message.status)
    found = {status: int(number) for status, number in db.session.execute(stmt)}
    db.session.commit()
    rows = [{"status": s.value, "messages": found.get(s.value, 0), "counted_at": now}
            for s in Status]  # fmt: skip
    with db.engine.begin() as conn:  # its own short transaction
        conn.execute(_upsert(COUNTS, replace=True), rows)
    return found


def settled_before(now: datetime) -> datetime:
    """The end of the last hour whose attempts can no longer change (status.Lease.settle_after)."""
    lag = timedelta(seconds=Lease.from_config(current_app.config).settle_after) + CLOCK_SKEW
    return (now - lag).replace(minute=0, second=0, microsecond=0)


def chart_hours(now: datetime) -> list[datetime]:
    """The starts of the chart's hours, oldest first, the current one last."""
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    return [this_hour - timedelta(hours=n) for n in range(CHART_HOURS - 1, -1, -1)]


def count_hours(since: datetime) -> dict[datetime, Hour]:
    """Sent and failed attempts per hour from since on, straight from ix_attempts_finished."""
    bucket = _hour(Attempt.finished_at)
    stmt = (
        select(bucket, Attempt.outcome, func.count())
        .where(Attempt.finished_at >= since)
        .where(Attempt.outcome.in_([Outcome.SENT.value, Outcome.FAILED.value]))
        .group_by(bucket, Attempt.outcome)
    )
    found: dict[tuple[datetime, str], int] = {}
    for start, outcome, number in db.session.execute(stmt):
        if isinstance(start, str):
            start = datetime.fromisoformat(start)
        found[(start.replace(tzinfo=None), outcome)] = number
    starts = {start for start, _ in found}
    return {h: Hour(h, found.get((h, "sent"), 0), found.get((h, "failed"), 0)) for h in starts}


def roll_up_hours(now: datetime | None = None) -> int:
    """Count and keep the chart's settled hours that are not kept yet; how many were kept."""
    now = now or utcnow()
    settled = settled_before(now)
    hours = [h for h in chart_hours(now) if h < settled]
    if not hours:
        return 0
    kept = select(HOURS.c.hour_at).where(HOURS.c.hour_at >= hours[0], HOURS.c.hour_at < settled)
    have = set(db.session.scalars(kept))
    missing = [h for h in hours if h not in have]
    if not missing:
        db.session.commit()
        return 0
    counted = count_hours(missing[0])
    db.session.commit()
    store_hours([counted.get(h, Hour(h, 0, 0)) for h in missing], now)
    return len(missing)


def store_hours(hours: list[Hour], now: datetime) -> None:
    """Keep settled hours in attempt_hours; an hour another worker stored first stays as it is.

    Both counted the same settled attempts, so either row is right, and the primary
    key keeps an hour from being stored twice. A failure (a deadlock between two
    workers) is logged: the next roll-up stores what is still missing.
    """
    rows = [{"hour_at": h.start, "sent": h.sent, "failed": h.failed, "counted_at": now}
            for h in hours]  # fmt: skip
    try:
        with db.engine.begin() as conn:  # its own short transaction
            conn.execute(_upsert(HOURS, replace=False), rows)
    except DBAPIError as exc:
        log.warning("hourly chart: could not store %d counted hours: %s", len(rows), exc.orig)


def ended(
    since: datetime, until: datetime | None = None, cap: int | None = None
) -> tuple[list[tuple[str, charts.Outcome]], bool]:
    """Messages that ended sent or failed from since on (until, if given), newest first, each
    with its stream; at most cap of them, and whether there were more.

    A range of ix_messages_settled: a message is settled as its end is recorded.
    """
    stmt = (
        select(Message.settled_at, Message.stream, Message.status, Message.created_at,
               Message.sent_at)
        .where(Message.settled_at >= since, Message.status.in_(ENDED))
        .order_by(Message.settled_at.desc())
    )  # fmt: skip
    if until is not None:
        stmt = stmt.where(Message.settled_at < until)
    if cap is not None:
        stmt = stmt.limit(cap + 1)
    rows = db.session.execute(stmt).all()
    db.session.commit()
    more = cap is not None and len(rows) > cap
    found = [
        (stream, charts.Outcome(at, status, queue_to_sent(created, sent)))
        for at, stream, status, created, sent in rows[:cap]
        if at is not None  # never: the range is on settled_at
    ]
    return found, more


def stream_hours(now: datetime) -> list[datetime]:
    """The starts of the hours the charts per stream may show, oldest first."""
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    return [this_hour - timedelta(hours=n) for n in range(STREAM_CHART_HOURS - 1, -1, -1)]


def roll_up_stream_hours(now: datetime | None = None) -> int:
    """Count and keep, per stream, the oldest settled hours of the last week not kept yet
    (STREAM_HOURS_AT_ONCE at most); how many hours were kept. Each hour is stored for
    every stream, so an hour with no row is one not counted yet."""
    now = now or utcnow()
    settled = settled_before(now)
    hours = [h for h in stream_hours(now) if h < settled]
    if not hours:
        return 0
    kept = select(STREAM_HOURS.c.hour_at).where(
        STREAM_HOURS.c.hour_at >= hours[0], STREAM_HOURS.c.hour_at < settled
    )
    have = set(db.session.scalars(kept.distinct()))
    missing = [h for h in hours if h not in have][:STREAM_HOURS_AT_ONCE]
    if not missing:
        db.session.commit()
        return 0
    found, _ = ended(missing[0], missing[-1] + timedelta(hours=1))
    rows = []
    for stream in Stream:
        mine = (outcome for name, outcome in found if name == stream.value)
        tallied = charts.tally(mine, missing[0], timedelta(hours=1))
        for h in missing:
            b = tallied.get(h, charts.Bucket(h))
            rows.append({"hour_at": h, "stream": stream.value, "sent": b.sent,
                         "failed": b.failed, "p50_ms": in_ms(b.p50), "p95_ms": in_ms(b.p95),
                         "counted_at": now})  # fmt: skip
    try:
        with db.engine.begin() as conn:  # its own short transaction
            conn.execute(_upsert(STREAM_HOURS, replace=False), rows)
    except DBAPIError as exc:
        log.warning("charts per stream: could not store %d counted hours: %s", len(missing),
                    exc.orig)  # fmt: skip
    return len(missing)


def _hour(column: Any) -> Any:
    dialect = db.engine.dialect.name
    if dialect == "postgresql":
        return func.date_trunc("hour", column)
    if dialect in ("mysql", "mariadb"):
        return func.date_format(column, literal_column("'%Y-%m-%d %H:00:00'"))
    return func.strftime("%Y-%m-%d %H:00:00", column)


def _upsert(table: Table, *, replace: bool) -> Any:
    """INSERT into table that, on a row already there, replaces it or keeps it."""
    dialect = db.engine.dialect.name
    keys = [column.name for column in table.primary_key]
    values = [column.name for column in table.columns if column.name not in keys]
    if dialect in ("mysql", "mariadb"):
        mine = mysql.insert(table)
        kept = {keys[0]: mine.inserted[keys[0]]}
        return mine.on_duplicate_key_update(
            {name: mine.inserted[name] for name in values} if replace else kept
        )
    ours: Any = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
    if not replace:
        return ours.on_conflict_do_nothing()
    return ours.on_conflict_do_update(
        index_elements=keys, set_={name: ours.excluded[name] for name in values}
    )


def count_if_due(worker_id: str) -> None:
    """Keep the pages' figures: the full counts per status, unless a worker made them
    lately, and the settled hours of the charts not kept yet.

    A failure is logged, not raised: the pages show the last figures until the next.
    """
    try:
        now = utcnow()
        if counts_due(now):
            refresh_counts(now)
        roll_up_hours(now)
        roll_up_stream_hours(now)
    except Exception:
        log.exception("%s: counting messages for the pages failed", worker_id,
                      extra={"worker_id": worker_id})  # fmt: skip
