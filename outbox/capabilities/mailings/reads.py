"""The mailings as the pages and the API read them: a page of mailings newest first, one
mailing, and its first recipients."""

from sqlalchemy import select

from outbox.models import ID_RANGE, Mailing, Message
from outbox.models.db import db

PAGE = 50  # mailings on one page of the list


def page(before: int | None = None) -> tuple[list[Mailing], int | None]:
    """One page of mailings newest first, older than `before`, and the `before` of the next."""
    stmt = select(Mailing).order_by(Mailing.id.desc()).limit(PAGE + 1)
    if before is not None:
        stmt = stmt.where(Mailing.id < before)
    rows = list(db.session.scalars(stmt))
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    return rows, rows[-1].id if more else None


def find(mailing_id: int) -> Mailing | None:
    """The mailing of that id, or None."""
    return db.session.get(Mailing, mailing_id) if mailing_id in ID_RANGE else None


def recipients(mailing_id: int, limit: int) -> list[Message]:
    """The mailing's first recipients (their message rows) in the order they were added."""
    stmt = select(Message).where(Message.mailing_id == mailing_id).order_by(Message.id)
    return list(db.session.scalars(stmt.limit(limit)))
