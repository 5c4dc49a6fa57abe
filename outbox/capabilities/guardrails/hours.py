"""Outcomes counted per hour, sending domain and stream: added to as the queue records
attempts and the bounce reader applies bounces and complaints, read for the rates.

A worker's sends and refusals are not written in the transaction that records them: a
statement there would add a round trip to every group and make every worker wait on the
same hot row. They are kept in the session until it commits (dropped if it rolls back,
so a group recorded again after an outage counts once), then in the process, and written
by flush(), which the rates call first: every worker's periodic check, at least every
COUNT_INTERVAL. A worker that dies loses what it had not flushed, at most that long of
sent recipients, which makes the rates it leaves err high, toward a pause.
"""

import functools
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from flask import Flask, current_app
from sqlalchemy import Table, event, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.orm import Session

from outbox.capabilities.domains.sending import domain_of
from outbox.capabilities.guardrails.rates import Counts, Hour, hour_of
from outbox.core.recipients import Recipient, State
from outbox.core.status import Status
from outbox.models import GuardrailHour, Message
from outbox.models.db import db
from outbox.queue import Written

HOURS = cast(Table, GuardrailHour.__table__)
COLUMNS = ("sent", "refused", "bounced", "complained")


def add(found: Mapping[tuple[datetime, str, str], Counts]) -> None:
    """Add counts to their hours' rows in the caller's transaction (the caller commits).

    The rows are written in key order, so two writers lock them in the same order and
    wait for each other instead of deadlocking.
    """
    rows = [{"hour_at": hour_at, "domain": domain, "stream": stream,
             **{name: getattr(counts, name) for name in COLUMNS}}
            for (hour_at, domain, stream), counts in sorted(found.items()) if counts]  # fmt: skip
    for row in rows:
        db.session.execute(_adding(), row)


def _adding() -> Any:
    """INSERT an hour's row, or add to the row already there (built once per dialect)."""
    return _adding_for(db.engine.dialect.name)


@functools.cache
def _adding_for(dialect: str) -> Any:
    c = HOURS.c
    if dialect in ("mysql", "mariadb"):
        mine = mysql.insert(HOURS)
        return mine.on_duplicate_key_update({n: c[n] + mine.inserted[n] for n in COLUMNS})
    ours: Any = postgresql.insert(HOURS) if dialect == "postgresql" else sqlite.insert(HOURS)
    keys = ["hour_at", "domain", "stream"]
    return ours.on_conflict_do_update(
        index_elements=keys, set_={n: c[n] + ours.excluded[n] for n in COLUMNS}
    )


Tally = dict[tuple[datetime, str, str], list[int]]  # hour_at, domain, stream: sent, refused
STAGED = "outbox.guardrails.staged"  # a session's counts until it commits, in session.info
KEY = "outbox.guardrails.pending"  # the process's counts not yet written, in app.extensions
log = logging.getLogger(__name__)


class Pending:
    """The counts this process's committed transactions recorded and flush() has not written."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the lanes commit and the checks flush in threads
        self.tally: Tally = {}

    def merge(self, more: Tally) -> None:
        with self.lock:
            for key, (sent, refused) in more.items():
                kept = self.tally.setdefault(key, [0, 0])
                kept[0] += sent
                kept[1] += refused

    def take(self) -> Tally:
        with self.lock:
            taken, self.tally = self.tally, {}
        return taken


def init_app(app: Flask) -> None:
    """Keep the app's pending counts, and move a session's staged ones there as it commits."""
    app.extensions[KEY] = Pending()
    if not event.contains(Session, "after_commit", _committed):
        event.listen(Session, "after_commit", _committed)
        event.listen(Session, "after_soft_rollback", _rolled_back)


def _committed(session: Session) -> None:
    staged = session.info.pop(STAGED, None)
    if staged:
        pending = current_app.extensions.get(KEY)
        if pending is not None:
            pending.merge(staged)


def _rolled_back(session: Session, previous: object) -> None:
    session.info.pop(STAGED, None)


def recorded(written: Written) -> None:
    """The queue's hook: count the recipients a group of outcomes sent and refused for good
    (with a 5xx reply), by the hour they finished, kept in the session until it commits."""
    statuses = written.statuses
    done = [d for d, _ in written.errors if d.claim.id in statuses]
    if not done:
        return
    unread = [d.claim.id for d in done if d.claim.mail is None]
    read = _mail(unread) if unread else {}
    staged: Tally = db.session.info.setdefault(STAGED, {})
    for one in done:
        mail = one.claim.mail if one.claim.mail is not None else read.get(one.claim.id)
        if mail is None:
            continue
        domain = _domain(mail.from_addr)
        if domain is None:
            continue
        entries = one.recipients if one.recipients is not None else mail.recipients
        sent, refused = settled(entries, statuses[one.claim.id], one.claim.attempts + 1, one.code)
        if sent or refused:
            kept = staged.setdefault((hour_of(one.finished_at), domain, one.claim.stream), [0, 0])
            kept[0] += sent
            kept[1] += refused


def flush() -> int:
    """Write the counts this process has kept, in a transaction of its own; the rows written.

    On an error they are kept for the next flush, and the error is raised.
    """
    pending: Pending | None = current_app.extensions.get(KEY)
    taken = pending.take() if pending is not None else {}
    if not taken:
        return 0
    try:
        add({key: Counts(sent=sent, refused=refused) for key, (sent, refused) in taken.items()})
        db.session.commit()
    except Exception:
        db.session.rollback()
        assert pending is not None
        pending.merge(taken)
        raise
    return len(taken)


def settled(
    entries: Iterable[Recipient], status: Status, attempt: int, code: int | None
) -> tuple[int, int]:
    """The recipients one attempt sent, and those it refused for good with a 5xx reply;
    those settled by an earlier attempt are not counted again."""
    sent = refused = 0
    for entry in entries:
        if entry.state is None:  # settled by the message's new status, in this attempt
            if status is Status.SENT:
                sent += 1
            elif status is Status.FAILED and code is not None and code >= 500:
                refused += 1
        elif entry.attempts == attempt:
            if entry.state is State.SENT:
                sent += 1
            elif entry.state is State.FAILED and entry.code is not None and entry.code >= 500:
                refused += 1
    return sent, refused


@functools.lru_cache(maxsize=1024)
def _domain(address: str) -> str | None:
    """domain_of, kept for the few From addresses a queue sends from: IDNA costs more than
    the rest of counting an outcome."""
    return domain_of(address)


def _mail(ids: list[int]) -> dict[int, Any]:
    """The From and recipients of messages a claim came without."""
    c = Message.__table__.c
    stmt = select(c.id, c.from_addr, c.recipients).where(c.id.in_(ids))
    return {row.id: row for row in db.session.execute(stmt)}


def returned(message: Message, at: datetime, *, bounced: int = 0, complained: int = 0) -> None:
    """Count recipients of message that bounced or complained, in the hour the report came
    (the bounce reader's, before it commits)."""
    domain = _domain(message.from_addr)
    if domain is not None and (bounced or complained):
        add({(hour_of(at), domain, message.stream): Counts(bounced=bounced,
                                                           complained=complained)})  # fmt: skip


def since(start: datetime) -> list[Hour]:
    """Every counted hour from start on."""
    c = HOURS.c
    stmt = select(c.hour_at, c.domain, c.stream, *(c[n] for n in COLUMNS)).where(c.hour_at >= start)
    found = [(row.hour_at, row.domain, row.stream,
              Counts(row.sent, row.refused, row.bounced, row.complained))
             for row in db.session.execute(stmt)]  # fmt: skip
    db.session.commit()
    return found
