"""Message and recipient rows read and written behind the app's back, to set up and check states."""

from collections import Counter

import sqlalchemy as sa
from sqlalchemy import select, update

from outbox import queue
from outbox.core.status import Status
from outbox.models import Attempt, Message, utcnow
from outbox.models.db import db
from outbox.queue.wire import recipient_json

from .app import draft as make_draft


def fresh(message_id: int) -> Message:
    db.session.expire_all()
    return db.session.get(Message, message_id)


def states(message: Message) -> dict[str, tuple[str, int | None, int]]:
    """Each recipient's state, last code and attempts, as the API tells them."""
    return {
        r["address"]: (r["state"], r["code"], r["attempts"])
        for r in (recipient_json(entry, message) for entry in message.recipients)
    }


def delivered(smtp) -> Counter[str]:  # type: ignore[no-untyped-def]
    """How many times each recipient got a mail."""
    return Counter(rcpt for mail in smtp.received for rcpt in mail.rcpt_tos)


def attempts_of(message_id: int) -> list[Attempt]:
    return db.session.query(Attempt).filter_by(message_pk=message_id).order_by(Attempt.id).all()


def store(message_id: int, old: Status, **values: object) -> None:
    """Write straight into one row, guarded by the status it must be in."""
    stmt = update(Message).where(Message.id == message_id, Message.status == old.value)
    assert db.session.execute(stmt.values(**values)).rowcount == 1
    db.session.commit()


def make_due(message_id: int) -> None:
    """Let a deferred message's wait run out now."""
    store(message_id, Status.DEFERRED, next_attempt_at=utcnow())


def enqueue_many(count: int) -> list[str]:
    """Insert count queued messages in one statement; return their Message-IDs."""

    draft = make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text="hi")
    first, _ = queue.enqueue(draft, source="test", max_attempts=5)
    rows = [
        {c.key: getattr(first, c.key) for c in Message.__table__.columns if c.key != "id"}
        | {"message_id": f"<bulk-{n}@example.com>", "subject": f"bulk {n}"}
        for n in range(1, count)
    ]
    db.session.execute(sa.insert(Message), rows)
    db.session.commit()
    return [first.message_id] + [r["message_id"] for r in rows]


def statuses() -> Counter[str]:
    db.session.expire_all()
    rows = db.session.execute(sa.select(Message.status, sa.func.count()).group_by(Message.status))
    counts = Counter(dict(rows.all()))
    db.session.commit()
    return counts


def snapshot() -> list[tuple]:
    """Everything a button could change, for every message."""
    db.session.expire_all()
    rows = db.session.execute(select(Message).order_by(Message.id)).scalars()
    return [(m.id, m.status, m.attempts, m.max_attempts, m.next_attempt_at) for m in rows]
