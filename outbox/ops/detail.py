"""One message in detail, as its page and GET /api/messages/<id> read it: the row, its
attempts, attachments and copies, and an attachment's bytes a chunk at a time."""

from collections.abc import Iterator

from sqlalchemy import select

from outbox.models import ID_RANGE, Attachment, AttachmentChunk, Attempt, Message
from outbox.models.db import db


def message(message_pk: int, *, fresh: bool = False) -> Message | None:
    """The message of that id, or None; fresh reads its row again over what the session holds."""
    if message_pk not in ID_RANGE:
        return None  # PostgreSQL and SQLite raise an error for an id past 64 bits
    return db.session.get(Message, message_pk, populate_existing=fresh)


def attempts(message_pk: int) -> list[Attempt]:
    """The message's attempts, oldest first."""
    stmt = select(Attempt).where(Attempt.message_pk == message_pk).order_by(Attempt.id)
    return list(db.session.scalars(stmt))


def attachments(message_pk: int) -> list[Attachment]:
    """The message's attachments (not their bytes), in the order they were stored."""
    stmt = select(Attachment).where(Attachment.message_pk == message_pk).order_by(Attachment.id)
    return list(db.session.scalars(stmt))


def copies(message_pk: int, limit: int) -> list[int]:
    """The ids of the first copies staff sent of the message (send again), up to limit."""
    stmt = select(Message.id).where(Message.resent_from == message_pk).order_by(Message.id)
    return list(db.session.scalars(stmt.limit(limit)))


def attachment(message_pk: int, attachment_id: int) -> Attachment | None:
    """One attachment of the message, or None if the message holds no such attachment."""
    found = db.session.get(Attachment, attachment_id) if attachment_id in ID_RANGE else None
    return found if found is not None and found.message_pk == message_pk else None


def attachment_bytes(attachment_id: int) -> Iterator[bytes]:
    """An attachment's bytes, a chunk a read as the iterator is taken.

    The chunks' numbers are read now; each chunk is let go of once handed on, so a
    large attachment never sits whole in the session.
    """
    stmt = select(AttachmentChunk.seq).where(AttachmentChunk.attachment_id == attachment_id)
    seqs = list(db.session.scalars(stmt.order_by(AttachmentChunk.seq)))
    return _chunks(attachment_id, seqs)


def _chunks(attachment_id: int, seqs: list[int]) -> Iterator[bytes]:
    for seq in seqs:
        yield db.session.get_one(AttachmentChunk, (attachment_id, seq)).data
        db.session.expunge_all()
