"""Claiming due messages for a worker, renewing its claims, and handing them back."""

import functools
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Executable,
    Row,
    Update,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
)
from sqlalchemy.exc import DBAPIError

from outbox.core.status import CLAIMABLE, Status
from outbox.core.streams import CLAIM_ORDER, Stream
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.models import utcnow
from outbox.models.db import db
from outbox.queue.moves import MESSAGES, changed, guarded

CLAIM_TRIES = 8
T = TypeVar("T")


@dataclass(frozen=True)
class Claim:
    """A message this worker holds: what the outcome writes need to stay guarded."""

    id: int
    worker_id: str
    attempts: int
    max_attempts: int
    started_at: datetime
    mail: Any = field(default=None, compare=False, repr=False)  # claim_batch(with_mail=True)
    stream: str = DEFAULT_STREAM.value  # core.streams: the metrics count attempts by it


def retryable(exc: DBAPIError) -> bool:
    """Deadlocks, lock timeouts and busy databases: worth trying the claim again."""
    orig = exc.orig
    code = orig.args[0] if orig is not None and orig.args else None
    if code in (1205, 1213):  # MySQL/MariaDB lock wait timeout, deadlock
        return True
    if getattr(orig, "sqlstate", None) in ("40001", "40P01", "55P03"):  # PostgreSQL
        return True
    return "database is locked" in str(orig)  # SQLite


def with_retries(step: Callable[[], T]) -> T:
    """Run step, a whole transaction that commits itself, again after a deadlock, a lock
    timeout or a busy database (up to CLAIM_TRIES times, with a short random wait)."""
    for attempt in range(CLAIM_TRIES):
        try:
            return step()
        except DBAPIError as exc:
            db.session.rollback()
            if not retryable(exc) or attempt == CLAIM_TRIES - 1:
                raise
            time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


def claim_batch(
    worker_id: str,
    limit: int,
    now: datetime | None = None,
    *,
    with_mail: bool = False,
    caps: Mapping[Stream, int] | None = None,
    held: frozenset[str] = frozenset(),
) -> list[Claim]:
    """Mark up to limit due messages as sending by this worker, in one short transaction.

    Transactional mail first (streams.CLAIM_ORDER); caps: the most of a stream this claim
    takes; held: domains whose broadcast mail is not taken (From addresses at them).
    with_mail, each claim also carries the columns a mail is written from (claim.mail),
    read in the claim's own transaction.
    """

    def step() -> list[Claim]:
        moment = now or utcnow()
        rows = _claim_rows(worker_id, limit, moment, with_mail, caps or {}, _held(held))
        if with_mail and rows and db.engine.dialect.name != "sqlite":
            # Read for the chosen rows only: a lane holds up to limit rows, and
            # at a million messages both lanes do.
            ids = [r.id for r in rows]
            mails = {m.id: m for m in db.session.execute(_claimed_mail(), {"ids": ids})}
            rows = [mails[i] for i in ids]
        db.session.commit()
        return [
            Claim(
                r.id,
                worker_id,
                r.attempts,
                r.max_attempts,
                moment,
                r if with_mail else None,
                r.stream,
            )  # fmt: skip
            for r in rows
        ]

    return with_retries(step)


# What a mail is written from (mime.prepare reads these), beside what a claim needs;
# mailing_id and fields: a mailing's recipient row is rendered from them;
# raw_size and envelope_from: a mail handed over by SMTP goes as it came;
# created_at: the queue-to-250 the metrics observe.
MAIL_COLUMNS = ("subject", "from_addr", "from_name", "reply_to", "reply_to_name", "recipients",
                "text_body", "html_body", "headers", "message_id", "attachment_count",
                "mailing_id", "fields", "raw_size", "envelope_from", "created_at")  # fmt: skip


def _claim_columns(with_mail: bool) -> list[Any]:
    names = ("id", "priority", "next_attempt_at", "attempts", "max_attempts", "stream")
    return [MESSAGES.c[name] for name in (*names, *(MAIL_COLUMNS if with_mail else ()))]


def _by_claim_order(row: Row[Any]) -> tuple[int, datetime, int]:
    """Due rows go by priority, then due time, then id; ix_messages_claim has this order."""
    return (-row.priority, row.next_attempt_at, row.id)


def _held(domains: frozenset[str]) -> tuple[str, ...]:
    """Held domains in one order, so a statement built for them is built once."""
    return tuple(sorted(domains))


def _claim_rows(
    worker_id: str,
    limit: int,
    now: datetime,
    with_mail: bool,
    caps: Mapping[Stream, int],
    held: tuple[str, ...] = (),
) -> list[Row[Any]]:
    """Choose and mark the rows of one claim (inside the caller's transaction), a stream at
    a time: a stream is not read once the streams before it filled the claim."""
    values: dict[str, Any] = {"worker": worker_id, "now": now}
    rows: list[Row[Any]] = []
    for stream in CLAIM_ORDER:
        wanted = min(limit - len(rows), caps.get(stream, limit))
        if wanted > 0:
            skip = held if stream is Stream.BROADCAST else ()
            rows += _stream_rows(stream, wanted, values, with_mail, skip)
    if rows and db.engine.dialect.name != "sqlite":
        values["ids"] = [r.id for r in rows]
        moved = changed(_mark_claimed(), values)
        # The rows are locked by this transaction, so all of them must move.
        if moved != len(rows):
            raise RuntimeError(f"{moved} of {len(rows)} locked messages claimed")
    return rows


def _stream_rows(
    stream: Stream, limit: int, values: dict[str, Any], with_mail: bool, held: tuple[str, ...]
) -> list[Row[Any]]:
    """Up to limit due rows of one stream in claim order: marked on SQLite, locked elsewhere."""
    if db.engine.dialect.name == "sqlite":
        # SQLite has no row locks; one UPDATE takes its write lock, so choosing
        # and marking the rows is a single atomic step.
        found = db.session.execute(_claim_returning(stream, limit, with_mail, held), values)
        return sorted(found, key=_by_claim_order)
    # One locking read per status, each an ordered range of ix_messages_claim;
    # SKIP LOCKED lets workers take disjoint rows without waiting on each other.
    candidates: list[Row[Any]] = []
    for status in CLAIMABLE:
        lane = _lane(status.value, stream, limit, held)
        candidates.extend(db.session.execute(lane, values))
    return sorted(candidates, key=_by_claim_order)[:limit]


def _claim_order() -> tuple[Any, ...]:
    c = MESSAGES.c
    return (c.priority.desc(), c.next_attempt_at, c.id)


def _not_from(held: tuple[str, ...]) -> ColumnElement[bool]:
    """Rows whose From address is at none of the held domains.

    Read along ix_messages_claim, past the held rows: a cost only while a domain is held.
    """
    at = func.lower(MESSAGES.c.from_addr)
    return ~or_(*(at.endswith("@" + domain, autoescape=True) for domain in held))


@functools.lru_cache(maxsize=64)
def _lane(status: str, stream: Stream, limit: int, held: tuple[str, ...] = ()) -> Executable:
    """Lock up to limit due rows of one claimable status and stream, in claim order,
    skipping locked ones and those from held domains."""
    c = MESSAGES.c
    lane = select(*_claim_columns(False))
    lane = lane.where(c.status == status, c.stream == stream.value,
                      c.next_attempt_at <= bindparam("now"))  # fmt: skip
    if held:
        lane = lane.where(_not_from(held))
    return lane.order_by(*_claim_order()).limit(limit).with_for_update(skip_locked=True)


@functools.cache
def _claimed_mail() -> Executable:
    """The claim's and the mail's columns of the given rows."""
    ids: Any = bindparam("ids", expanding=True)
    return select(*_claim_columns(True)).where(MESSAGES.c.id.in_(ids))


@functools.lru_cache(maxsize=64)
def _claim_returning(
    stream: Stream, limit: int, with_mail: bool, held: tuple[str, ...] = ()
) -> Executable:
    """SQLite's claim of a stream: mark up to limit due rows and return them, in one statement."""
    c = MESSAGES.c
    claimable = [s.value for s in CLAIMABLE]
    due = select(c.id).where(c.status.in_(claimable), c.stream == stream.value,
                             c.next_attempt_at <= bindparam("now"))  # fmt: skip
    if held:
        due = due.where(_not_from(held))
    chosen = due.order_by(*_claim_order()).limit(limit).scalar_subquery()
    return _claiming(c.id.in_(chosen)).returning(*_claim_columns(with_mail))


@functools.cache
def _mark_claimed() -> Executable:
    ids: Any = bindparam("ids", expanding=True)
    return _claiming(MESSAGES.c.id.in_(ids))


def _claiming(*where: ColumnElement[bool]) -> Update:
    """Mark waiting rows as sending, claimed by the worker and at the time bound later."""
    return guarded(CLAIMABLE, Status.SENDING, *where,
                   locked_by=bindparam("worker"), locked_at=bindparam("now"))  # fmt: skip


def has_due(
    now: datetime | None = None,
    stream: Stream | None = None,
    held: frozenset[str] = frozenset(),
) -> bool:
    """Whether any due message (of the stream, if given) is still waiting unclaimed (a
    plain, non-locking read); held: domains whose broadcast mail does not count."""
    c = MESSAGES.c
    claimable = [s.value for s in CLAIMABLE]
    due = select(c.id).where(c.status.in_(claimable), c.next_attempt_at <= (now or utcnow()))
    if stream is not None:
        due = due.where(c.stream == stream.value)
    if held:
        due = due.where(or_(c.stream != Stream.BROADCAST.value, _not_from(_held(held))))
    found = db.session.execute(select(exists(due))).scalar()
    db.session.commit()
    return bool(found)


def renew(claims: Sequence[Claim], now: datetime) -> set[int]:
    """Refresh this worker's claims; return the ids it still holds."""
    if not claims:
        return set()
    c = MESSAGES.c
    mine = (c.id.in_([claim.id for claim in claims]), c.locked_by == claims[0].worker_id)
    changed(guarded(Status.SENDING, None, *mine, locked_at=now))
    still = set(db.session.scalars(select(c.id).where(c.status == Status.SENDING.value, *mine)))
    db.session.commit()
    return still


def _hand_back(worker_id: str, *where: ColumnElement[bool]) -> int:
    """Return this worker's matching claims to waiting, as if never claimed; commit."""
    c = MESSAGES.c
    never_tried = case((c.attempts == 0, Status.QUEUED.value), else_=Status.DEFERRED.value)
    stmt = guarded(Status.SENDING, (Status.QUEUED, Status.DEFERRED), c.locked_by == worker_id,
                   *where, status=never_tried, locked_by=None, locked_at=None)  # fmt: skip
    count = changed(stmt)
    db.session.commit()
    return count


def release(claims: Sequence[Claim]) -> int:
    """Hand back claimed messages that were not started, as if never claimed."""
    if not claims:
        return 0
    return _hand_back(claims[0].worker_id, MESSAGES.c.id.in_([c.id for c in claims]))


def release_held(worker_id: str) -> int:
    """Hand back every claim this worker still holds.

    For the start of a pass: a worker's passes never overlap, so a claim it holds
    then was left by an error (a COMMIT whose reply was lost, a pass cut short).
    """
    return _hand_back(worker_id)
