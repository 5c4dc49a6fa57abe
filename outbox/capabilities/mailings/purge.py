"""Retention of mailings: a mailing goes once the purge has taken every row of its recipients.

A mailing's body and attachments are its recipients' only copy, so it stays while any of
its rows does. Older than the cutoff with none left, it goes with its attachments, a batch
at a time. An append (intake.append) holds the mailing's row lock while it adds rows: the
purge takes the same lock and looks for rows again under it, so a mailing that has just
been given new recipients stays.
"""

from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, delete, exists, func, not_, select

from outbox.capabilities.mailings.intake import MAILINGS
from outbox.models import MailingAttachment, MailingAttachmentChunk
from outbox.models.db import db
from outbox.queue.moves import MESSAGES, SETTLED

FILES = cast(Table, MailingAttachment.__table__)
CHUNKS = cast(Table, MailingAttachmentChunk.__table__)
BATCH = 500  # mailings a transaction


def purge_old(cutoff: datetime) -> int:
    """Remove mailings created before cutoff that have no rows left; how many."""
    removed = 0
    while True:
        chosen = select(MAILINGS.c.id).where(_old_and_empty(cutoff))
        ids = list(db.session.scalars(chosen.order_by(MAILINGS.c.id).limit(BATCH)))
        if not ids:
            db.session.commit()
            return removed
        locked = select(MAILINGS.c.id).where(MAILINGS.c.id.in_(ids)).with_for_update()
        db.session.execute(locked).all()  # SQLite: its write lock comes with the first DELETE
        still = list(db.session.scalars(select(MAILINGS.c.id).where(
            MAILINGS.c.id.in_(ids), _old_and_empty(cutoff))))  # fmt: skip
        if still:
            files = select(FILES.c.id).where(FILES.c.mailing_id.in_(still))
            db.session.execute(delete(CHUNKS).where(CHUNKS.c.attachment_id.in_(files)))
            db.session.execute(delete(FILES).where(FILES.c.mailing_id.in_(still)))
            db.session.execute(delete(MAILINGS).where(MAILINGS.c.id.in_(still)))
        db.session.commit()
        removed += len(still)  # the others were given rows since: no longer chosen


def count_old(cutoff: datetime) -> int:
    """How many mailings purge_old would remove once the messages settled before cutoff
    were gone (outbox purge --dry-run): those whose every row would go with them."""
    m = MESSAGES.c
    would_go = m.status.in_([s.value for s in SETTLED]) & (m.settled_at < cutoff)
    staying = exists().where(m.mailing_id == MAILINGS.c.id, not_(would_go))
    stmt = select(func.count()).where(MAILINGS.c.created_at < cutoff, not_(staying))
    found = int(db.session.scalar(stmt) or 0)
    db.session.commit()
    return found


def _old_and_empty(cutoff: datetime) -> ColumnElement[Any]:
    rows = exists().where(MESSAGES.c.mailing_id == MAILINGS.c.id)
    return (MAILINGS.c.created_at < cutoff) & not_(rows)
