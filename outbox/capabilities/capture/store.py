"""The capture store: mail kept instead of sent, written by the transport, read by the pages."""

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, func, insert, select

from outbox.models import ID_RANGE, Captured, Message, utcnow
from outbox.models.db import db

PAGE = 50  # captured mails on one page of the list
CAPTURED = cast(Table, Captured.__table__)


@dataclass(frozen=True)
class Listed:
    """A captured mail as the list shows it, without its bytes."""

    id: int
    message_pk: int
    created_at: datetime
    sender: str
    recipients: list[str]
    subject: str
    size: int


@dataclass(frozen=True)
class Kept:
    """One delivery the transport took, to be written."""

    message_pk: int
    sender: str
    recipients: list[str]
    raw: bytes


def keep(kept: list[Kept], now: datetime | None = None) -> None:
    """Store deliveries in a transaction of their own, as a server would take them.

    Its own connection: the worker's session holds claims and outcomes not yet written.
    """
    now = now or utcnow()
    rows = [{"message_pk": k.message_pk, "created_at": now, "sender": k.sender,
             "recipients": k.recipients, "raw": k.raw} for k in kept]  # fmt: skip
    with db.engine.begin() as conn:
        conn.execute(insert(CAPTURED), rows)


def page(before: int | None = None) -> tuple[list[Listed], int | None]:
    """One page of captured mail newest first, older than `before`, and the next page's `before`."""
    c = CAPTURED.c
    query = (
        select(
            c.id,
            c.message_pk,
            c.created_at,
            c.sender,
            c.recipients,
            Message.subject,
            func.length(c.raw),
        )  # fmt: skip
        .join(Message, Message.id == c.message_pk)
        .order_by(c.id.desc())
        .limit(PAGE + 1)
    )
    if before is not None:
        query = query.where(c.id < before)
    rows = [Listed(*row) for row in db.session.execute(query)]
    db.session.commit()
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    return rows, rows[-1].id if more else None


def find(captured_pk: int) -> Captured | None:
    """The captured mail of that id, bytes and all, or None."""
    return db.session.get(Captured, captured_pk) if captured_pk in ID_RANGE else None


def of_message(message_pk: int) -> list[int]:
    """The ids of one message's captured copies, oldest first (one per attempt that kept one)."""
    stmt = select(CAPTURED.c.id).where(CAPTURED.c.message_pk == message_pk)
    return list(db.session.scalars(stmt.order_by(CAPTURED.c.id)))


def remove_of(message_pks: list[int]) -> int:
    """Delete the captured copies of these messages (retention), in the caller's transaction."""
    result = db.session.execute(delete(CAPTURED).where(CAPTURED.c.message_pk.in_(message_pks)))
    return int(getattr(result, "rowcount", 0) or 0)
