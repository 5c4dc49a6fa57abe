"""The database tables: messages, their attachments and attempts, and the rest by subject.

Every table is importable from here; the staff's tables live in .staff, the workers'
bookkeeping in .ops, and the column types in .types.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, configure_mappers, mapped_column, relationship

from outbox.core.addresses import Kind, Mailbox
from outbox.core.recipients import Recipient, by_kind
from outbox.core.status import Status
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.core.streams import STREAM_CHARS
from outbox.models.bounces import BounceMail
from outbox.models.bulk_jobs import BulkJob
from outbox.models.capture import Captured
from outbox.models.db import Base
from outbox.models.dkim import DkimKey as DkimKey
from outbox.models.guardrails import DomainPause, GuardrailHour
from outbox.models.mailings import Mailing, MailingAttachment, MailingAttachmentChunk
from outbox.models.ops import (
    AttemptHour,
    Pause,
    RetentionRun,
    StatusCount,
    StreamHour,
    Wake,
    WorkerBeat,
)
from outbox.models.routes import ROUTE_CHARS, RouteHealth
from outbox.models.staff import ApiToken, AuditEvent, SignInFailure, User
from outbox.models.suppression import Suppression
from outbox.models.throttle import Throttle
from outbox.models.types import (
    CHUNK_BYTES,
    ID_RANGE,
    REPLY_CHARS,
    Blob,
    Id,
    Key,
    LongText,
    Recipients,
    Timestamp,
    utcnow,
)
from outbox.models.webhooks import WebhookDelivery, WebhookEndpoint


class Message(Base):
    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    message_id: Mapped[str] = mapped_column(Key)
    # "" but for the further parts of a mail a relay hands over in several SMTP
    # transactions under one Message-ID (submission.store), each a row with its own
    # recipients, named by its envelope's digest: unique with message_id (migration 0022).
    part: Mapped[str] = mapped_column(String(64), server_default="")
    # Addresses as parsed at enqueue: addr-spec and display name apart, never parsed again.
    from_addr: Mapped[str] = mapped_column(String(998))
    from_name: Mapped[str] = mapped_column(String(998), default="")
    reply_to: Mapped[str | None] = mapped_column(String(998))
    reply_to_name: Mapped[str] = mapped_column(String(998), default="")
    # To, Cc and Bcc in the order given, one Recipient each (core.recipients).
    recipients: Mapped[list[Recipient]] = mapped_column(Recipients)
    subject: Mapped[str] = mapped_column(String(998), default="")
    text_body: Mapped[str | None] = mapped_column(LongText)
    html_body: Mapped[str | None] = mapped_column(LongText)
    headers: Mapped[dict[str, str] | None] = mapped_column(JSON)
    # The app's own labels (the API's "metadata"), given back, never sent (migration 0021).
    meta: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # core.streams: transactional or broadcast (migration 0024).
    stream: Mapped[str] = mapped_column(
        String(STREAM_CHARS), default=DEFAULT_STREAM.value, server_default=DEFAULT_STREAM.value
    )
    send_after: Mapped[datetime | None] = mapped_column(Timestamp)
    status: Mapped[str] = mapped_column(String(16), default=Status.QUEUED.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer)
    last_retry: Mapped[datetime | None] = mapped_column(Timestamp)
    next_attempt_at: Mapped[datetime] = mapped_column(Timestamp)
    last_error: Mapped[str | None] = mapped_column(Text)
    locked_by: Mapped[str | None] = mapped_column(String(255))
    locked_at: Mapped[datetime | None] = mapped_column(Timestamp)
    sent_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # When it settled (sent, failed or cancelled; moves.guarded writes it, a resend clears
    # it) and when retention dropped its bodies and attachments (outbox.capabilities.retention).
    settled_at: Mapped[datetime | None] = mapped_column(Timestamp)
    bodies_dropped_at: Mapped[datetime | None] = mapped_column(Timestamp)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    source: Mapped[str] = mapped_column(Key, default="")
    idempotency_key: Mapped[str | None] = mapped_column(Key)
    request_hash: Mapped[str | None] = mapped_column(String(64))
    attachment_count: Mapped[int] = mapped_column(Integer, default=0)
    # The sent message this one is a copy of (staff's "Send again"); its copies point here.
    resent_from: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )
    # mailings: the mailing this row is a recipient of, and its fields for the
    # templates. No foreign key: SQLite cannot add one without rebuilding messages.
    mailing_id: Mapped[int | None] = mapped_column(BigInteger)
    fields: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # submission: a mail handed over by SMTP is kept as it came, in raw_chunks;
    # raw_size is its length (None: a mail written from the columns), envelope_from MAIL FROM.
    raw_size: Mapped[int | None] = mapped_column(BigInteger)
    envelope_from: Mapped[str | None] = mapped_column(String(998))

    @property
    def sender(self) -> Mailbox:
        return Mailbox(self.from_addr, self.from_name)

    @property
    def reply_to_mailbox(self) -> Mailbox | None:
        return Mailbox(self.reply_to, self.reply_to_name) if self.reply_to else None

    def recipients_of(self, kind: Kind) -> list[Mailbox]:
        """The mailboxes named in To, Cc or Bcc, in the order given."""
        return by_kind(self.recipients)[kind]

    def listed(self, kind: Kind) -> str:
        """The mailboxes of To, Cc or Bcc as a person reads them, comma-separated."""
        return ", ".join(str(mailbox) for mailbox in self.recipients_of(kind))

    attachments: Mapped[list["Attachment"]] = relationship(
        back_populates="message", lazy="raise", order_by="Attachment.id"
    )
    attempt_log: Mapped[list["Attempt"]] = relationship(
        back_populates="message", lazy="raise", order_by="Attempt.id"
    )

    __table_args__ = (
        Index("ix_messages_created", "created_at"),
        UniqueConstraint("source", "idempotency_key", name="uq_messages_idempotency"),
        UniqueConstraint("message_id", "part", name="uq_messages_message_id_part"),
    )


# The claim reads one status and stream at a time in exactly this order, so each claim
# is an index range scan that stops after a batch, however many sent rows the table
# holds, and finds the transactional mail behind a backlog of broadcast mail at once.
Index(
    "ix_messages_claim",
    Message.status,
    Message.stream,
    Message.priority.desc(),
    Message.next_attempt_at,
    Message.id,
)


class Attachment(Base):
    __tablename__ = "attachments"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    message_pk: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    filename: Mapped[str] = mapped_column(String(255))
    content_type: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    # An inline part's Content-ID, without <> (migration 0020); None: an attachment.
    content_id: Mapped[str | None] = mapped_column(String(250), nullable=True)

    message: Mapped[Message] = relationship(back_populates="attachments")


class AttachmentChunk(Base):
    __tablename__ = "attachment_chunks"

    attachment_id: Mapped[int] = mapped_column(
        ForeignKey("attachments.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(Blob)


class RawChunk(Base):
    """A piece of a mail handed over by SMTP, CHUNK_BYTES long but the last."""

    __tablename__ = "raw_chunks"

    message_pk: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(Blob)


class Attempt(Base):
    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    message_pk: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    started_at: Mapped[datetime] = mapped_column(Timestamp)
    finished_at: Mapped[datetime] = mapped_column(Timestamp)
    worker_id: Mapped[str] = mapped_column(String(255))
    outcome: Mapped[str] = mapped_column(String(16))
    smtp_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    # The server's reply at the end of DATA when it took the mail ("2.0.0 Ok: queued as ...").
    reply: Mapped[str | None] = mapped_column(String(REPLY_CHARS))
    route: Mapped[str | None] = mapped_column(String(ROUTE_CHARS))  # the route it went through

    message: Mapped[Message] = relationship(back_populates="attempt_log")


# Per-status listing newest first, and capped counts.
Index("ix_messages_status_id", Message.status, Message.id)
# The oldest waiting message: the first due entry of each claimable status.
Index("ix_messages_due", Message.status, Message.next_attempt_at)
# The purge finds old settled rows by a range scan, not by reading every message; the
# dashboard's latency tile reads the messages sent lately from this index alone.
Index(
    "ix_messages_settled", Message.settled_at, Message.status, Message.created_at, Message.sent_at
)
Index("ix_messages_bodies", Message.bodies_dropped_at, Message.settled_at)
# Covering for the dashboard's hourly chart: the range and the outcome, no row lookups.
Index("ix_attempts_finished", Attempt.finished_at, Attempt.outcome)
# mailings: a mailing's progress is one GROUP BY status over its own rows.
Index("ix_messages_mailing", Message.mailing_id, Message.status)


# Set up the relationships now rather than at the first query or constructor call:
# queue builds stored Messages as the ORM loads them, without __init__, which is what
# would otherwise trigger it.
configure_mappers()

__all__ = [
    "ApiToken",
    "Attachment",
    "AttachmentChunk",
    "RawChunk",
    "Attempt",
    "AttemptHour",
    "AuditEvent",
    "Blob",
    "BounceMail",
    "BulkJob",
    "Captured",
    "CHUNK_BYTES",
    "DomainPause",
    "GuardrailHour",
    "Id",
    "Key",
    "LongText",
    "Mailing",
    "MailingAttachment",
    "MailingAttachmentChunk",
    "Message",
    "Pause",
    "REPLY_CHARS",
    "RetentionRun",
    "RouteHealth",
    "SignInFailure",
    "StatusCount",
    "StreamHour",
    "Suppression",
    "Throttle",
    "Timestamp",
    "User",
    "Wake",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WorkerBeat",
    "utcnow",
    "ID_RANGE",
]
