"""A raw mail on the pages: its text and HTML bodies read out of the stored bytes on view,
the stored bytes themselves as a download (the message page's "Mail as submitted"), and
the other parts of a mail handed over in several transactions."""

from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import cast

from sqlalchemy import select

from outbox.capabilities.submission.raw import read
from outbox.models import Message, RawChunk
from outbox.models.db import db
from outbox.queue.attachments import Damaged

SHOWN_BYTES = 8 * 1024 * 1024  # a larger mail is offered as a download only


def onto(message: Message) -> list[tuple[str, str]]:
    """Show a raw mail's bodies in its row for the message page, outside the session (nothing
    is written); returns its attachments' (file name, content type)."""
    if message.raw_size is None or message.bodies_dropped_at is not None:
        return []
    db.session.expunge(message)
    if message.raw_size > SHOWN_BYTES:
        message.text_body = f"(a mail of {message.raw_size:,} bytes: download it to read it)"
        return []
    try:
        mail = cast(EmailMessage, message_from_bytes(read(message.id, message.raw_size),
                                                     policy=policy.default))  # fmt: skip
        for kind in ("plain", "html"):
            part = mail.get_body(preferencelist=(kind,))
            text = part.get_content() if part is not None else None
            setattr(message, "text_body" if kind == "plain" else "html_body", text)
        return [(p.get_filename() or "(no name)", p.get_content_type())
                for p in mail.iter_attachments()]  # fmt: skip
    except (Damaged, LookupError, ValueError) as exc:
        message.text_body = f"(the stored mail cannot be read: {exc})"
        return []
    except RecursionError:  # the email package recurses into each nested comment
        message.text_body = "(the stored mail cannot be read: a header nests comments too deep)"
        return []


def other_parts(message: Message) -> list[int]:
    """The ids of the other rows under a raw mail's Message-ID: the rest of a mail a relay
    (or a client after 452) handed over in several transactions."""
    if message.raw_size is None:
        return []
    stmt = select(Message.id).where(Message.message_id == message.message_id,
                                    Message.id != message.id)  # fmt: skip
    return list(db.session.scalars(stmt.order_by(Message.id)))


def chunks(message_pk: int) -> Iterator[bytes]:
    """The stored bytes of a raw mail, one chunk a read."""
    seqs = select(RawChunk.seq).where(RawChunk.message_pk == message_pk).order_by(RawChunk.seq)
    for seq in list(db.session.scalars(seqs)):
        yield db.session.get_one(RawChunk, (message_pk, seq)).data
        db.session.expunge_all()
