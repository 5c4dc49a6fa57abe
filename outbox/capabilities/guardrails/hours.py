"""Outcomes counted per hour, sending domain and stream: added to as the queue records
attempts and the bounce reader applies bounces and complaints, read for the rates."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, select
from sqlalchemy.dialects import mysql, postgresql, sqlite

from outbox.capabilities.domains.sending import domain_of
from outbox.capabilities.guardrails.rates import Counts, Hour, hour_of
from outbox.core.recipients import Recipient, State
from outbox.core.status import Status
from outbox.models import GuardrailHour, Message
from outbox.models.db import db
from outbox.queue import Written

HOURS = cast(Table, GuardrailHour.__table__)
COLUMNS = ("sent", "refused", "bounced", "complained")

Added = dict[tuple[datetime, str, str], Counts]  # hour_at, domain, stream: counts to add


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
    """INSERT an hour's row, or add to the row already there."""
    dialect = db.engine.dialect.name
    c = HOURS.c
    if dialect in ("mysql", "mariadb"):
        mine = mysql.insert(HOURS)
        return mine.on_duplicate_key_update({n: c[n] + mine.inserted[n] for n in COLUMNS})
    ours: Any = postgresql.insert(HOURS) if dialect == "postgresql" else sqlite.insert(HOURS)
    keys = ["hour_at", "domain", "stream"]
    return ours.on_conflict_do_update(
        index_elements=keys, set_={n: c[n] + ours.excluded[n] for n in COLUMNS}
    )


def recorded(written: Written) -> None:
    """The queue's hook: count the recipients a group of outcomes sent and refused for good
    (with a 5xx reply), by the hour they finished, before the group commits."""
    statuses = written.statuses
    done = [d for d, _ in written.errors if d.claim.id in statuses]
    if not done:
        return
    unread = [d.claim.id for d in done if d.claim.mail is None]
    read = _mail(unread) if unread else {}
    found: Added = {}
    for one in done:
        mail = one.claim.mail if one.claim.mail is not None else read.get(one.claim.id)
        if mail is None:
            continue
        domain = domain_of(mail.from_addr)
        if domain is None:
            continue
        entries = one.recipients if one.recipients is not None else mail.recipients
        counts = settled(entries, statuses[one.claim.id], one.claim.attempts + 1, one.code)
        if counts:
            key = (hour_of(one.finished_at), domain, one.claim.stream)
            found[key] = found.get(key, Counts()) + counts
    add(found)


def settled(entries: Iterable[Recipient], status: Status, attempt: int, code: int | None) -> Counts:
    """The recipients one attempt sent and refused for good with a 5xx reply; those settled
    by an earlier attempt are not counted again."""
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
    return Counts(sent=sent, refused=refused)


def _mail(ids: list[int]) -> dict[int, Any]:
    """The From and recipients of messages a claim came without."""
    c = Message.__table__.c
    stmt = select(c.id, c.from_addr, c.recipients).where(c.id.in_(ids))
    return {row.id: row for row in db.session.execute(stmt)}


def returned(message: Message, at: datetime, *, bounced: int = 0, complained: int = 0) -> None:
    """Count recipients of message that bounced or complained, in the hour the report came
    (the bounce reader's, before it commits)."""
    domain = domain_of(message.from_addr)
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
