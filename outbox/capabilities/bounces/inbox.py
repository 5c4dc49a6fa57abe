"""The bounce inbox's reads: the stored mails newest first, by what they turned out to be,
and one mail."""

from sqlalchemy import Select, select

from outbox.models import ID_RANGE, BounceMail
from outbox.models.db import db

PAGE = 50  # mails on one page of the inbox
# The inbox's tabs: every mail, then by what reading it found. "complaint" is the
# complaints view: the feedback reports. "unmatched" is a bounce or report that names no
# message of outbox; "unparsed" is a mail nothing could be read from.
FILTERS = ("all", "hard", "soft", "complaint", "unmatched", "unparsed", "auto-reply")
REPORTS = ("hard", "soft", "other", "complaint")


def _filtered(chosen: str) -> Select[BounceMail]:
    query = select(BounceMail)
    if chosen == "unmatched":
        return query.where(BounceMail.kind.in_(REPORTS), BounceMail.message_pk.is_(None))
    if chosen == "unparsed":  # never read yet counts as not read
        return query.where(BounceMail.kind.in_(("unparsed", "new")))
    if chosen != "all":
        return query.where(BounceMail.kind == chosen)
    return query


def page(chosen: str, before: int | None = None) -> tuple[list[BounceMail], int | None]:
    """One page of mails newest first, older than `before`, and the `before` of the next page."""
    query = _filtered(chosen).order_by(BounceMail.id.desc()).limit(PAGE + 1)
    if before is not None:
        query = query.where(BounceMail.id < before)
    rows = list(db.session.scalars(query))
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    return rows, rows[-1].id if more else None


def of_message(message_pk: int, limit: int = PAGE) -> list[BounceMail]:
    """The bounce mails matched to one message, newest first."""
    query = select(BounceMail).where(BounceMail.message_pk == message_pk)
    return list(db.session.scalars(query.order_by(BounceMail.id.desc()).limit(limit)))


def find(bounce_pk: int) -> BounceMail | None:
    """The stored mail of that id, or None."""
    return db.session.get(BounceMail, bounce_pk) if bounce_pk in ID_RANGE else None
