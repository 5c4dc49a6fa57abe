"""Read-only queries behind the staff pages, each bounded whatever the table's size."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from flask import current_app
from sqlalchemy import Table, func, literal_column, or_, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import load_only

from .extensions import db
from .models import Attempt, AttemptHour, Message, StatusCount, utcnow
from .status import CLAIMABLE, Outcome, Status

log = logging.getLogger(__name__)

PAGE_SIZE = 50
# Counting live stops here: an exact count of a million sent rows costs more than a
# page may take. Past the cap a page shows the full count a worker made lately
# (refresh_counts, every COUNT_INTERVAL), with its age, or "1,000+" before the first.
COUNT_CAP = 1_000
IN_FLIGHT = {Status.QUEUED.value, Status.SENDING.value, Status.DEFERRED.value}
LIST_COLUMNS = (
    Message.id, Message.created_at, Message.to_addrs, Message.subject, Message.status,
    Message.attempts, Message.last_retry, Message.next_attempt_at, Message.last_error,
)  # fmt: skip
COUNTS = cast(Table, StatusCount.__table__)
ALL = "all"  # the key of the count of every message


@dataclass(frozen=True)
class Count:
    value: int
    capped: bool  # the live count reached the cap: value is the cap or a worker's count
    counted_at: datetime | None = None  # when a worker counted value, if it did

    def __str__(self) -> str:
        if self.counted_at is not None:
            return f"≈{self.value:,}"
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"

    @property
    def note(self) -> str:
        """What the figure is, for a tooltip."""
        if self.counted_at is not None:
            return f"counted in full at {self.counted_at:%Y-%m-%d %H:%M:%S} UTC"
        if self.capped:
            return f"counting stops at {self.value:,}"
        return "counted now"


def _live(status: str | None, cap: int) -> int:
    """Messages in a status (all if None), counted up to cap + 1."""
    rows = select(Message.id)
    if status is not None:
        rows = rows.where(Message.status == status)
    found = db.session.execute(select(func.count()).select_from(rows.limit(cap + 1).subquery()))
    return int(found.scalar_one())


def _counted() -> dict[str, tuple[int, datetime]]:
    """The workers' last full count per status, and of all messages under ALL."""
    rows = db.session.execute(select(COUNTS.c.status, COUNTS.c.messages, COUNTS.c.counted_at))
    found = {status: (messages, moment) for status, messages, moment in rows}
    if found:
        found[ALL] = (sum(n for n, _ in found.values()), min(at for _, at in found.values()))
    return found


def _counts(names: list[str], cap: int | None) -> dict[str, Count]:
    """Live counts up to cap; past it, the last full count if that is past the cap too."""
    cap = COUNT_CAP if cap is None else cap
    live = {name: _live(None if name == ALL else name, cap) for name in names}
    full = _counted() if any(value > cap for value in live.values()) else {}
    found = {}
    for name, value in live.items():
        counted, moment = full.get(name, (0, None))
        if value <= cap:
            found[name] = Count(value, False)
        elif moment is not None and counted > cap:
            found[name] = Count(counted, True, moment)
        else:
            found[name] = Count(cap, True)
    return found


def count(status: str | None, cap: int | None = None) -> Count:
    """Messages in a status (all if None), live up to cap (COUNT_CAP if None)."""
    name = status or ALL
    return _counts([name], cap)[name]


def status_counts(cap: int | None = None) -> dict[str, Count]:
    """Counts for every status."""
    return _counts([status.value for status in Status], cap)


def counts(cap: int | None = None) -> dict[str, Count]:
    """Counts for every status and for all messages (key "all")."""
    return _counts([ALL, *(status.value for status in Status)], cap)


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
        conn.execute(_insert(COUNTS, replace=True), rows)
    return found


def _insert(table: Table, *, replace: bool) -> Any:
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


# A search reads at most this many ids per request: a substring match cannot use an
# index, and a rare word would otherwise scan the whole table. Staff page on to older
# messages, window by window.
SEARCH_WINDOW = 50_000


@dataclass(frozen=True)
class Page:
    rows: list[Message]
    next_before: int | None
    searched_down_to: int | None = None  # the lowest id a search looked at

    @property
    def in_flight(self) -> bool:
        return any(row.status in IN_FLIGHT for row in self.rows)


def page(status: str | None, search: str | None, before: int | None) -> Page:
    """Newest first, PAGE_SIZE at a time, keyset-paginated on id (no OFFSET)."""
    stmt = select(Message).options(load_only(*LIST_COLUMNS))
    if status is not None:
        stmt = stmt.where(Message.status == status)
    if before is not None:
        stmt = stmt.where(Message.id < before)
    floor = None
    if search:
        top = before if before is not None else (db.session.scalar(func.max(Message.id)) or 0) + 1
        floor = max(top - SEARCH_WINDOW, 1)
        stmt = stmt.where(
            Message.id >= floor,
            or_(
                Message.to_addrs.icontains(search, autoescape=True),
                Message.subject.icontains(search, autoescape=True),
            ),
        )
    rows = list(db.session.execute(stmt.order_by(Message.id.desc()).limit(PAGE_SIZE + 1)).scalars())
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        return Page(rows, rows[-1].id, None)
    if floor is not None and floor > 1:  # older messages are left to search
        return Page(rows, floor, floor)
    return Page(rows, None, None)


def oldest_waiting() -> datetime | None:
    """When the oldest queued or deferred message was created."""
    found = []
    for status in CLAIMABLE:
        first = select(Message.created_at).where(Message.status == status.value)
        moment = db.session.execute(first.order_by(Message.id).limit(1)).scalar()
        if moment is not None:
            found.append(moment)
    return min(found, default=None)


def latest_failures(limit: int = 10) -> list[Message]:
    """The most recent failed messages."""
    stmt = (
        select(Message)
        .options(load_only(*LIST_COLUMNS))
        .where(Message.status == Status.FAILED.value)
    )
    return list(db.session.execute(stmt.order_by(Message.id.desc()).limit(limit)).scalars())


def _hour(column: Any) -> Any:
    dialect = db.engine.dialect.name
    if dialect == "postgresql":
        return func.date_trunc("hour", column)
    if dialect in ("mysql", "mariadb"):
        return func.date_format(column, literal_column("'%Y-%m-%d %H:00:00'"))
    return func.strftime("%Y-%m-%d %H:00:00", column)


@dataclass(frozen=True)
class Hour:
    start: datetime
    sent: int
    failed: int


# A worker's clock may run this far ahead of or behind the web server's.
CLOCK_SKEW = timedelta(minutes=1)
ROLLUP = cast(Table, AttemptHour.__table__)


def settled_before(now: datetime) -> datetime:
    """The end of the last hour whose attempts can no longer change.

    An attempt's finished_at is taken before its commit: the outcome may wait up to
    RECORD_AFTER for its group, and then a worker waits out a database outage for up
    to LOCK_TIMEOUT before giving up on the write. So an hour settles that long (plus
    clock skew) after its end.
    """
    config = current_app.config
    lag = timedelta(seconds=config["LOCK_TIMEOUT"] + config["RECORD_AFTER"]) + CLOCK_SKEW
    return (now - lag).replace(minute=0, second=0, microsecond=0)


def _count_hours(since: datetime) -> dict[datetime, Hour]:
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


def _store_hours(hours: list[Hour], now: datetime) -> None:
    """Keep settled hours in attempt_hours; an hour another process stored first stays as it is.

    Both counted the same settled attempts, so either row is right, and the primary
    key keeps an hour from being stored twice. Storing only saves later requests the
    count: if it fails (a deadlock between two first views), the page still shows
    what it counted.
    """
    rows = [{"hour_at": h.start, "sent": h.sent, "failed": h.failed, "counted_at": now}
            for h in hours]  # fmt: skip
    stmt = _insert(ROLLUP, replace=False)
    try:
        with db.engine.begin() as conn:  # its own short transaction, not the request's
            conn.execute(stmt, rows)
    except DBAPIError as exc:
        log.warning("hourly chart: could not store %d counted hours: %s", len(rows), exc.orig)


def hourly(now: datetime | None = None) -> list[Hour]:
    """Attempts that sent or failed a message, per hour over the last 24 hours.

    Settled hours are counted once and kept in attempt_hours; only the hours since
    (at most two) are counted from the attempts on every view, so the page costs the
    same whether the table holds a thousand attempts or a hundred million.
    """
    now = now or utcnow()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    hours = [this_hour - timedelta(hours=n) for n in range(23, -1, -1)]
    settled = settled_before(now)
    kept = select(AttemptHour).where(AttemptHour.hour_at >= hours[0], AttemptHour.hour_at < settled)
    shown = {r.hour_at: Hour(r.hour_at, r.sent, r.failed) for r in db.session.scalars(kept)}
    missing = [h for h in hours if h < settled and h not in shown]
    live = [h for h in hours if h >= settled]
    counted = _count_hours(min(missing + live))
    fresh = [counted.get(h, Hour(h, 0, 0)) for h in missing]
    if fresh:
        _store_hours(fresh, now)
    shown.update({h.start: h for h in fresh})
    shown.update({h: counted.get(h, Hour(h, 0, 0)) for h in live})
    return [shown[h] for h in hours]
