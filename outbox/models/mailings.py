"""Mailings: one body stored once for many recipients, each a message row."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Blob, Id, Key, LongText, Timestamp, utcnow


class Mailing(Base):
    """The body of a mailing: sender, templates, headers and settings, once for all its recipients.

    Its recipients are rows of messages with mailing_id set, their own fields in
    messages.fields, their subject as each gets it (for the list, the API and search) and
    their bodies left empty: a worker renders the mail from here at send time
    (outbox.capabilities.mailings.render).
    """

    __tablename__ = "mailings"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    from_addr: Mapped[str] = mapped_column(String(998))
    from_name: Mapped[str] = mapped_column(String(998), default="")
    reply_to: Mapped[str | None] = mapped_column(String(998))
    reply_to_name: Mapped[str] = mapped_column(String(998), default="")
    # Jinja2 templates, rendered per recipient in the sandbox (mailings.templates).
    subject: Mapped[str] = mapped_column(Text, default="")
    text_body: Mapped[str | None] = mapped_column(LongText)
    html_body: Mapped[str | None] = mapped_column(LongText)
    headers: Mapped[dict[str, str] | None] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    send_after: Mapped[datetime | None] = mapped_column(Timestamp)
    # A template of the one-click unsubscribe URL; None: OUTBOX_UNSUBSCRIBE_URL's endpoint.
    unsubscribe_url: Mapped[str | None] = mapped_column(String(2000))
    state: Mapped[str] = mapped_column(String(16), default="open")  # open, paused, cancelled
    recipient_count: Mapped[int] = mapped_column(Integer, default=0)
    attachment_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    source: Mapped[str] = mapped_column(Key, default="")
    idempotency_key: Mapped[str | None] = mapped_column(Key)

    __table_args__ = (
        UniqueConstraint("source", "idempotency_key", name="uq_mailings_idempotency"),
    )

    def as_dict(self) -> dict[str, Any]:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class MailingAttachment(Base):
    """A file of a mailing, stored once, in chunks of CHUNK_BYTES (as a message's are)."""

    __tablename__ = "mailing_attachments"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    mailing_id: Mapped[int] = mapped_column(
        ForeignKey("mailings.id", ondelete="CASCADE"), index=True
    )
    filename: Mapped[str] = mapped_column(String(255))
    content_type: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    content_id: Mapped[str | None] = mapped_column(String(250), nullable=True)  # inline part


class MailingAttachmentChunk(Base):
    __tablename__ = "mailing_attachment_chunks"

    attachment_id: Mapped[int] = mapped_column(
        ForeignKey("mailing_attachments.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(Blob)
