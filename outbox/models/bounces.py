"""Bounce mails as they came in: the raw mail first, then what reading it found."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Blob, Id, Timestamp


class BounceMail(Base):
    """One mail that came back to the bounce address, kept raw whatever it turned out to be.

    It is stored before it is read (kind "new"), so a mail that cannot be read or matched
    is never lost: the bounce inbox page shows it. message_pk has no foreign key: the
    evidence outlives a purged message.
    """

    __tablename__ = "bounce_mails"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(Timestamp)
    via: Mapped[str] = mapped_column(String(8))  # smtp or imap
    # SHA-256 of the raw mail: the same mail seen twice (an IMAP poll cut short) is one row.
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    envelope_from: Mapped[str | None] = mapped_column(String(998))
    envelope_to: Mapped[str | None] = mapped_column(Text)  # RCPT TO addresses, one a line
    size: Mapped[int] = mapped_column(Integer)
    raw: Mapped[bytes] = mapped_column(Blob)
    # new (not read yet), hard, soft, auto-reply, unparsed, or other (a DSN that
    # reports no failure: delivered, relayed, expanded).
    kind: Mapped[str] = mapped_column(String(16), default="new")
    subject: Mapped[str] = mapped_column(String(998), default="")
    from_header: Mapped[str] = mapped_column(String(998), default="")
    message_pk: Mapped[int | None] = mapped_column(BigInteger)
    matched_by: Mapped[str | None] = mapped_column(String(16))  # verp or message-id
    recipient: Mapped[str | None] = mapped_column(String(998))  # the first one reported
    status: Mapped[str | None] = mapped_column(String(16))  # its DSN status, 5.1.1
    diagnostic: Mapped[str | None] = mapped_column(Text)
    # Every recipient the mail reports: address, action, status, diagnostic, hard.
    results: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    note: Mapped[str | None] = mapped_column(Text)  # why unmatched, or what went wrong
    # A hard bounce that came before its recipient's send was recorded: applied when it is.
    waiting: Mapped[bool] = mapped_column(Boolean, default=False)
    processed_at: Mapped[datetime | None] = mapped_column(Timestamp)


Index("ix_bounce_mails_kind", BounceMail.kind, BounceMail.id)
Index("ix_bounce_mails_message", BounceMail.message_pk, BounceMail.id)
Index("ix_bounce_mails_received", BounceMail.received_at)
Index("ix_bounce_mails_waiting", BounceMail.waiting, BounceMail.message_pk)
