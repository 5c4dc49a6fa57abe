"""Read-only queries behind the staff pages and the API's listing of messages, each bounded
whatever the table's size; no writes."""

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Text, cast, func, literal_column, or_, select
from sqlalchemy.orm import load_only

from outbox.core.addresses import Mailbox
from outbox.core.filters import Filter
from outbox.core.latency import queue_to_sent, rank
from outbox.core.status import CLAIMABLE, Status
from outbox.core.streams import Stream
from outbox.models import AttemptHour, Message, utcnow
from outbox.models.db import db
from outbox.ops import rollups
from outbox.ops.rollups import Hour

PAGE_SIZE = 50
# Counting live stops here: an exact count of a million sent rows costs more than a
# page may take. Past the cap a page shows the full count a worker made lately
# (rollups.refresh_counts, every COUNT_INTERVAL), with its age, or "1,000+" before the first.
COUNT_CAP = 1_000
IN_FLIGHT = {Status.QUEUED.value, Status.SENDING.value, Status.DEFERRED.value}
LIST_COLUMNS = (
    Message.id, Message.created_at, Message.recipients, Message.subject, Message.status,
    Message.attempts, Message.last_retry, Message.next_attempt_at, Message.last_error,
    Message.source, Message.sent_at, Message.stream,
)  # fmt: skip
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
    c = rollups.COUNTS.c
    rows = db.session.execute(select(c.status, c.messages, c.counted_at))
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


def status_counts(cap: int | None = None) -> dict[str, Count]:
    """Counts for every status."""
    return _counts([status.value for status in Status], cap)


def counts(cap: int | None = None) -> dict[str, Count]:
    """Counts for every status and for all messages (key "all")."""
    return _counts([ALL, *(status.value for status in Status)], cap)


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


# MariaDB reads a status newest first by a backward scan of the primary key when the
# status holds about 1% of the rows, filtering as it goes: measured on a million rows,
# 51 failed messages that were all old took 1.3 s and 989,051 rows read; through
# ix_messages_status_id, 1.4 ms and 51 rows. PostgreSQL and SQLite take that index alone.
STATUS_INDEX_HINT = "FORCE INDEX (ix_messages_status_id)"


def with_status(stmt: Select[Any], status: str) -> Select[Any]:
    """The messages of one status, newest first through ix_messages_status_id on every database."""
    stmt = stmt.where(Message.status == status)
    for dialect in ("mysql", "mariadb"):
        stmt = stmt.with_hint(Message, STATUS_INDEX_HINT, dialect)
    return stmt


def matches(
    status: str | None,
    search: str,
    before: int | None,
    cap: int | None = None,
    stream: str | None = None,
) -> Count:
    """How many messages a search finds in the window its page looks at, counted up to cap
    (filter_matches of the words, a status and a stream)."""
    return filter_matches(Filter(status=status, words=search or None, stream=stream), before, cap)


def page(
    status: str | None,
    search: str | None,
    before: int | None,
    stream: str | None = None,
    *,
    of: Filter | None = None,
) -> Page:
    """Newest first, PAGE_SIZE at a time, keyset-paginated on id (no OFFSET): the page of
    a filter (the list's), or of the words, a status and a stream."""
    return filter_page(of or Filter(status=status, words=search or None, stream=stream), before)


def in_statuses(message_pks: Collection[int], statuses: Collection[Status]) -> int:
    """How many of these messages are in one of these statuses (a bulk action's question)."""
    stmt = select(func.count()).where(
        Message.id.in_(message_pks), Message.status.in_([s.value for s in statuses])
    )
    return int(db.session.execute(stmt).scalar_one())


def oldest_waiting(now: datetime | None = None) -> datetime | None:
    """When the message that has waited longest became due; None if none is due.

    A queued or deferred message is due from its next_attempt_at: its send_after (or
    its enqueue time), the retry time a deferral set, or when staff resent it. One
    query: per claimable status the earliest due time, one seek in ix_messages_due
    however many messages wait. (ix_messages_claim, with stream and priority before
    next_attempt_at, made it a read of every waiting message's entry: 15,000 entries
    and 4-5 ms beside a million messages on MariaDB, whose loose index scan does not
    take that index's descending priority.)
    """
    now = now or utcnow()
    firsts = [
        select(func.min(Message.next_attempt_at))
        .where(Message.status == status.value, Message.next_attempt_at <= now)
        .scalar_subquery()
        for status in CLAIMABLE
    ]
    found = db.session.execute(select(*firsts)).one()
    return min((moment for moment in found if moment is not None), default=None)


def waiting_by_stream(cap: int | None = None) -> dict[str, Count]:
    """Messages queued or deferred, due or not, per stream (core.streams), each counted up
    to cap in one query: ranges of ix_messages_claim, whose status and stream come first."""
    cap = COUNT_CAP if cap is None else cap
    waiting = [status.value for status in CLAIMABLE]
    counted = [
        select(func.count())
        .select_from(
            select(Message.id)
            .where(Message.status.in_(waiting), Message.stream == stream.value)
            .limit(cap + 1)
            .subquery()
        )
        .scalar_subquery()
        for stream in Stream
    ]
    found = db.session.execute(select(*counted)).one()
    return {
        stream.value: Count(min(value, cap), value > cap)
        for stream, value in zip(Stream, found, strict=True)
    }


@dataclass(frozen=True)
class Latency:
    """Queue-to-250 of the messages sent lately: the median and the 95th percentile."""

    p50: float | None  # seconds; None when none was sent
    p95: float | None
    count: int  # the messages they are of
    capped: bool  # more were sent: the figures are of the latest `count`


# The messages a latency figure is made of at most: the latest sent, so that a busy hour
# costs a bounded read (an index range on ix_messages_settled).
LATENCY_SAMPLE = 2_000
QUANTILES = (0.5, 0.95)


def _wait(rows: Any) -> Any:
    """sent_at - created_at of rows, in an order the database can sort by."""
    dialect = db.engine.dialect.name
    if dialect in ("mysql", "mariadb"):
        return func.timestampdiff(literal_column("MICROSECOND"), rows.c.created_at, rows.c.sent_at)
    if dialect == "postgresql":
        return rows.c.sent_at - rows.c.created_at
    return func.julianday(rows.c.sent_at) - func.julianday(rows.c.created_at)


def latency(since: datetime) -> Latency:
    """Queue-to-250 of the latest messages sent since then (at most LATENCY_SAMPLE of them).

    Read from ix_messages_settled alone (a message is settled as its sending is
    recorded, within RECORD_AFTER of its sent_at), and sorted by the database: two
    statements bring back two counts and the two messages at the quantiles' ranks, not
    a row per message sent in the last hour (at a thousand an hour, parsing those rows
    cost ten times what reading them did).
    """
    latest = (
        select(Message.created_at, Message.sent_at)
        .where(Message.settled_at >= since, Message.status == Status.SENT.value)
        .order_by(Message.settled_at.desc())
    )
    sample = latest.limit(LATENCY_SAMPLE).subquery()
    sent = (sample.c.created_at.is_not(None), sample.c.sent_at.is_not(None))
    over = select(func.count()).select_from(latest.limit(LATENCY_SAMPLE + 1).subquery())
    timed = select(func.count()).select_from(sample).where(*sent)
    everything, count = db.session.execute(
        select(over.scalar_subquery(), timed.scalar_subquery())
    ).one()
    capped = everything > LATENCY_SAMPLE
    if not count:
        return Latency(None, None, 0, capped)
    ranked = (
        select(sample.c.created_at, sample.c.sent_at,
               func.row_number().over(order_by=_wait(sample)).label("place"))
        .where(*sent)
        .subquery()
    )  # fmt: skip
    places = [rank(count, q) + 1 for q in QUANTILES]
    found = db.session.execute(
        select(ranked.c.place, ranked.c.created_at, ranked.c.sent_at).where(
            ranked.c.place.in_(places)
        )
    )
    waits = {place: queue_to_sent(created, sent) for place, created, sent in found}
    p50, p95 = (waits[place] for place in places)
    return Latency(p50, p95, count, capped)


def latest_failures(limit: int = 10) -> list[Message]:
    """The most recent failed messages."""
    stmt = with_status(select(Message).options(load_only(*LIST_COLUMNS)), Status.FAILED.value)
    return list(db.session.execute(stmt.order_by(Message.id.desc()).limit(limit)).scalars())


def hourly(now: datetime | None = None) -> list[Hour]:
    """Attempts that sent or failed a message, per hour over the last 24 hours.

    Settled hours come from attempt_hours, which workers keep (rollups.roll_up_hours);
    only the hours since (at most two), and any not kept yet, are counted from the
    attempts, so the page costs the same whether the table holds a thousand attempts
    or a hundred million.
    """
    now = now or utcnow()
    hours = rollups.chart_hours(now)
    settled = rollups.settled_before(now)
    kept = select(AttemptHour).where(AttemptHour.hour_at >= hours[0], AttemptHour.hour_at < settled)
    shown = {r.hour_at: Hour(r.hour_at, r.sent, r.failed) for r in db.session.scalars(kept)}
    counted = rollups.count_hours(min(h for h in hours if h not in shown))
    return [shown.get(h) or counted.get(h, Hour(h, 0, 0)) for h in hours]


# The API's listing. A page filtered by recipient, source or time reads at most this many
# ids: no index serves those filters in id order (the recipients are a JSON column), and a
# rare one would otherwise scan the whole table. Such a page may hold fewer messages than
# its limit, or none, and still have a next link: the client follows it to older ids.
# The status filter alone reads ix_messages_status_id and needs no window.
FILTER_WINDOW = 50_000
# What the API shows of a message in a list; never its bodies or headers.
FILTERED_COLUMNS = (
    Message.id, Message.message_id, Message.status, Message.from_addr, Message.from_name,
    Message.reply_to, Message.reply_to_name, Message.recipients, Message.subject,
    Message.priority, Message.attempts, Message.max_attempts, Message.created_at,
    Message.send_after, Message.next_attempt_at, Message.last_retry, Message.last_error,
    Message.sent_at, Message.stream,
)  # fmt: skip


@dataclass(frozen=True)
class Filters:
    """What a listing asks for; None for a filter not given."""

    status: str | None = None
    recipient: Mailbox | None = None
    source: str | None = None
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before
    stream: str | None = None

    @property
    def windowed(self) -> bool:
        """Whether a filter that no index serves in id order is given (see FILTER_WINDOW)."""
        given = (self.recipient, self.source, self.since, self.until, self.stream)
        return any(v is not None for v in given)


def _matching(filters: Filters) -> Select[Any]:
    """The messages of the filters, in SQL; a recipient's is a superset, checked in _has."""
    stmt = select(Message).options(load_only(*FILTERED_COLUMNS))
    if filters.status is not None:
        stmt = with_status(stmt, filters.status)  # ix_messages_status_id, on MariaDB too
    if filters.source is not None:
        stmt = stmt.where(Message.source == filters.source)
    if filters.stream is not None:
        stmt = stmt.where(Message.stream == filters.stream)
    if filters.since is not None:
        stmt = stmt.where(Message.created_at >= filters.since)
    if filters.until is not None:
        stmt = stmt.where(Message.created_at < filters.until)
    if filters.recipient is not None:
        # The address as a JSON string, escaped (as the column is written) or not; the
        # case a LIKE folds, or spacing, is settled by _has on the rows it finds.
        address = filters.recipient.address
        quoted = {json.dumps(address), json.dumps(address, ensure_ascii=False)}
        text = cast(Message.recipients, Text)
        stmt = stmt.where(or_(*(text.contains(q, autoescape=True) for q in quoted)))
    return stmt


def _has(message: Message, filters: Filters) -> bool:
    """Whether a row the SQL found names the recipient asked for, exactly."""
    if filters.recipient is None:
        return True
    return any(e.address == filters.recipient.address for e in message.recipients)


def filtered_page(
    filters: Filters, before: int | None, limit: int
) -> tuple[list[Message], int | None]:
    """A page of messages newest first (highest id), and the before id of the next, if any."""
    stmt = _matching(filters)
    if before is not None:
        stmt = stmt.where(Message.id < before)
    floor = None
    if filters.windowed:
        top = before if before is not None else (db.session.scalar(func.max(Message.id)) or 0) + 1
        floor = max(top - FILTER_WINDOW, 1)
        stmt = stmt.where(Message.id >= floor)
    stmt = stmt.order_by(Message.id.desc()).limit(limit + 1)
    rows: list[Message] = list(db.session.scalars(stmt))
    if len(rows) > limit:
        return [r for r in rows[:limit] if _has(r, filters)], rows[limit - 1].id
    found = [r for r in rows if _has(r, filters)]
    return found, floor if floor is not None and floor > 1 else None


# The outbox list's filter (core.filters). A page reads at most SEARCH_WINDOW ids below
# its `before` when a filter no index serves in id order is given, as the API's listing
# does with FILTER_WINDOW, and says so; the status and the mailing alone are served by
# ix_messages_status_id and ix_messages_mailing.
BULK_COUNT_CAP = 10_000  # "Resend all 10,000+ matching": counting stops past this


def _sender(value: str) -> Any:
    """The From address (or any at "@domain"), the case folded."""
    if value.startswith("@"):
        return func.lower(Message.from_addr).endswith(value, autoescape=True)
    return func.lower(Message.from_addr) == value


def narrowed(stmt: Select[Any], f: Filter, now: datetime) -> Select[Any]:
    """The messages of a filter, in SQL (no window): every term is a WHERE."""
    if f.status is not None:
        stmt = with_status(stmt, f.status)
    if f.mailing is not None:
        stmt = stmt.where(Message.mailing_id == f.mailing)
    if f.stream is not None:
        stmt = stmt.where(Message.stream == f.stream)
    recipients = cast(Message.recipients, Text)
    if f.to is not None:
        # The address as a JSON string (as the column is written, escaped or not), or
        # "@domain" closing the string; a LIKE folds the case on every database here.
        ends = (
            {f'{f.to}"'}
            if f.to.startswith("@")
            else {json.dumps(f.to), json.dumps(f.to, ensure_ascii=False)}
        )
        stmt = stmt.where(or_(*(recipients.icontains(e, autoescape=True) for e in ends)))
    if f.sender is not None:
        stmt = stmt.where(_sender(f.sender))
    if f.subject:
        stmt = stmt.where(Message.subject.icontains(f.subject, autoescape=True))
    if f.source:
        named = Message.source.startswith(f"{f.source}:", autoescape=True)
        stmt = stmt.where(or_(Message.source == f.source, named))
    for key, value in f.meta:
        stmt = stmt.where(Message.meta[key].as_string() == value)
    if f.error:
        stmt = stmt.where(Message.last_error.icontains(f.error, autoescape=True))
    since, until = f.bounds(now)
    if since is not None:
        stmt = stmt.where(Message.created_at >= since)
    if until is not None:
        stmt = stmt.where(Message.created_at < until)
    if f.words:
        stmt = stmt.where(or_(recipients.icontains(f.words, autoescape=True),
                              Message.subject.icontains(f.words, autoescape=True)))  # fmt: skip
    return stmt


def _windowed(stmt: Select[Any], f: Filter, before: int | None,
              now: datetime) -> tuple[Select[Any], int | None]:  # fmt: skip
    """The filter below before, within FILTER_WINDOW ids if no index serves it; the floor."""
    stmt = narrowed(stmt, f, now)
    if before is not None:
        stmt = stmt.where(Message.id < before)
    if not f.windowed:
        return stmt, None
    top = before if before is not None else highest_id() + 1
    floor = max(top - SEARCH_WINDOW, 1)
    return stmt.where(Message.id >= floor), floor


def highest_id() -> int:
    """The highest message id now, 0 for none."""
    return int(db.session.scalar(select(func.max(Message.id))) or 0)


def filter_page(f: Filter, before: int | None, now: datetime | None = None) -> Page:
    """The list's page of a filter: newest first, PAGE_SIZE at a time, keyset on id."""
    stmt, floor = _windowed(select(Message).options(load_only(*LIST_COLUMNS)), f, before,
                            now or utcnow())  # fmt: skip
    rows = list(db.session.execute(stmt.order_by(Message.id.desc()).limit(PAGE_SIZE + 1)).scalars())
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        return Page(rows, rows[-1].id, None)
    if floor is not None and floor > 1:  # older messages are left to look at
        return Page(rows, floor, floor)
    return Page(rows, None, None)


def filter_matches(f: Filter, before: int | None, cap: int | None = None,
                   now: datetime | None = None) -> Count:  # fmt: skip
    """How many messages a filter finds in the window its page looks at, up to cap."""
    cap = COUNT_CAP if cap is None else cap
    rows, _ = _windowed(select(Message.id), f, before, now or utcnow())
    found = db.session.execute(select(func.count()).select_from(rows.limit(cap + 1).subquery()))
    value = int(found.scalar_one())
    return Count(min(value, cap), value > cap)


def _movable(f: Filter, statuses: Collection[Status], now: datetime,
             ceiling: int) -> Select[Any]:  # fmt: skip
    """The ids of a filter's messages up to ceiling in one of the statuses (a move's)."""
    stmt = narrowed(select(Message.id), f, now).where(Message.id <= ceiling)
    return stmt.where(Message.status.in_([s.value for s in statuses]))


def movable_count(f: Filter, statuses: Collection[Status], ceiling: int, cap: int | None = None,
                  now: datetime | None = None) -> Count:  # fmt: skip
    """How many messages of a filter up to ceiling a move could take, counted up to cap
    (None: all of them, for a worker's job)."""
    rows = _movable(f, statuses, now or utcnow(), ceiling)
    if cap is not None:
        rows = rows.limit(cap + 1)
    found = db.session.execute(select(func.count()).select_from(rows.subquery()))
    value = int(found.scalar_one())
    if cap is None:
        return Count(value, False)
    return Count(min(value, cap), value > cap)


def movable_ids(f: Filter, statuses: Collection[Status], above: int, ceiling: int,
                limit: int, now: datetime | None = None) -> list[int]:  # fmt: skip
    """The next ids, lowest first, of a filter's messages a move could take, in (above, ceiling]."""
    stmt = _movable(f, statuses, now or utcnow(), ceiling).where(Message.id > above)
    return list(db.session.scalars(stmt.order_by(Message.id).limit(limit)))
