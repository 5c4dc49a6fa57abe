"""Attachments stored in chunks beside their message, and read back one chunk at a time."""

import io

from sqlalchemy import select

from outbox.core.checks import Upload
from outbox.models import CHUNK_BYTES, Attachment, AttachmentChunk
from outbox.models.db import db


class Damaged(Exception):
    """A message's stored attachments are incomplete; sent, it would be another mail."""


def store(message_pk: int, upload: Upload) -> None:
    """Add one attachment to the session's transaction, a chunk at a time."""
    data = upload.data
    attachment = Attachment(message_pk=message_pk, filename=upload.filename,
                            content_type=upload.content_type, size=len(data),
                            content_id=upload.content_id)  # fmt: skip
    db.session.add(attachment)
    db.session.flush()
    for seq, start in enumerate(range(0, len(data), CHUNK_BYTES)):
        chunk = AttachmentChunk(
            attachment_id=attachment.id, seq=seq, data=data[start : start + CHUNK_BYTES]
        )
        db.session.add(chunk)
        db.session.flush()
        db.session.expunge(chunk)


def read_attachments(message_pk: int, count: int | None = None) -> list[Upload]:
    """One message's attachments (inline parts too), chunk by chunk.

    Damaged if an attachment's chunks do not add up to the size it was stored with,
    or, given count, if the message holds another number of attachments.
    """
    listing = select(Attachment).where(Attachment.message_pk == message_pk)
    found = [_read(a) for a in db.session.scalars(listing.order_by(Attachment.id)).all()]
    if count is not None and len(found) != count:
        raise Damaged(f"{len(found)} of the message's {count} attachments are stored")
    return found


def read_inline(message_pk: int, largest: int) -> list[Upload]:
    """One message's inline parts (those with a Content-ID) of at most largest bytes."""
    listing = select(Attachment).where(
        Attachment.message_pk == message_pk,
        Attachment.content_id.is_not(None),
        Attachment.size <= largest,
    )
    return [_read(a) for a in db.session.scalars(listing.order_by(Attachment.id)).all()]


def _read(attachment: Attachment) -> Upload:
    """An attachment's data, chunk by chunk; Damaged if they do not add up to its size."""
    chunks = select(AttachmentChunk.data).where(AttachmentChunk.attachment_id == attachment.id)
    # One chunk at a time from the server into one buffer, whose getvalue() hands its
    # bytes over uncopied: all chunks fetched and then joined held a 20 MiB attachment twice.
    buffer, ordered = io.BytesIO(), chunks.order_by(AttachmentChunk.seq)
    for chunk in db.session.scalars(ordered, execution_options={"yield_per": 1}):
        buffer.write(chunk)
    data = buffer.getvalue()
    if len(data) != attachment.size:
        raise Damaged(
            f"attachment {attachment.filename!r} holds {len(data)} of its {attachment.size} bytes"
        )
    return Upload(attachment.filename, attachment.content_type, data, attachment.content_id)
