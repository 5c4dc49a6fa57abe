"""The database tables: messages, their attachments and attempts, and API tokens."""

from datetime import UTC, datetime

from flask_login import UserMixin
from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, configure_mappers, mapped_column, relationship

from .addresses import Kind, Mailbox, by_kind
from .extensions import Base
from .roles import ALL_SCOPES, allows
from .status import Status

# SQLite only numbers rows by itself for a plain INTEGER primary key.
Id = BigInteger().with_variant(Integer(), "sqlite")
# MySQL and MariaDB keep whole seconds unless told otherwise; the queue orders by
# these columns, so keep microseconds everywhere. All timestamps are naive UTC.
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# TEXT is 64 KiB on MySQL; bodies may be far larger.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
# One attachment is split into chunks of this many bytes, so that no single row
# comes near MySQL's max_allowed_packet (16 MiB by default) and no read holds more
# than a chunk of it at a time besides the message being built.
CHUNK_BYTES = 1024 * 1024
# Identifiers compared exactly: MySQL's default collation would fold case.
Key = String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")
# An accepting server's reply is kept up to this many characters: it names the queue id.
REPLY_CHARS = 255
Blob = LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


def utcnow() -> datetime:
    """The current time as the naive UTC datetime the tables hold."""
    return datetime.now(UTC).replace(tzinfo=None)


class Message(Base):
    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    message_id: Mapped[str] = mapped_column(Key, unique=True)
    # Addresses as parsed at enqueue: addr-spec and display name apart, never parsed again.
    from_addr: Mapped[str] = mapped_column(String(998))
    from_name: Mapped[str] = mapped_column(String(998), default="")
    reply_to: Mapped[str | None] = mapped_column(String(998))
    reply_to_name: Mapped[str] = mapped_column(String(998), default="")
    # To, Cc and Bcc in the order given: [{"kind": "to", "address": ..., "name": ...}, ...]
    # (addresses.stored).
    recipients: Mapped[list[dict[str, str]]] = mapped_column(JSON)
    subject: Mapped[str] = mapped_column(String(998), default="")
    text_body: Mapped[str | None] = mapped_column(LongText)
    html_body: Mapped[str | None] = mapped_column(LongText)
    headers: Mapped[dict[str, str] | None] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=0)
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
    # it) and when retention dropped its bodies and attachments (outbox.retention).
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
    )


# The claim reads one status at a time in exactly this order, so each claim is an
# index range scan that stops after a batch, however many sent rows the table holds.
Index(
    "ix_messages_claim",
    Message.status,
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

    message: Mapped[Message] = relationship(back_populates="attachments")


class AttachmentChunk(Base):
    __tablename__ = "attachment_chunks"

    attachment_id: Mapped[int] = mapped_column(
        ForeignKey("attachments.id", ondelete="CASCADE"), primary_key=True
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

    message: Mapped[Message] = relationship(back_populates="attempt_log")


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(Key, unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # What the token may do, space-separated (outbox.roles.SCOPES); all of them by default.
    scopes: Mapped[str] = mapped_column(String(64), default=ALL_SCOPES)


# Per-status listing newest first, the oldest waiting message, and capped counts.
Index("ix_messages_status_id", Message.status, Message.id)
# The purge finds old settled rows by a range scan, not by reading every message.
Index("ix_messages_settled", Message.settled_at)
Index("ix_messages_bodies", Message.bodies_dropped_at, Message.settled_at)
# Covering for the dashboard's hourly chart: the range and the outcome, no row lookups.
Index("ix_attempts_finished", Attempt.finished_at, Attempt.outcome)


class User(UserMixin, Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    email: Mapped[str] = mapped_column(Key, unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    last_sign_in_at: Mapped[datetime | None] = mapped_column(Timestamp)
    role: Mapped[str] = mapped_column(String(16), default="admin")  # outbox.roles.ROLES
    # Bumped at sign-out: every session issued before names an older one and ends.
    session_generation: Mapped[int] = mapped_column(Integer, default=0)

    def get_id(self) -> str:
        """The session's user id, bound to the password and sign-outs: each ends old sessions."""
        return f"{self.id}.{self.password_hash[-12:]}.{self.session_generation or 0}"

    def can(self, action: str) -> bool:
        """Whether this account's role allows an action (outbox.roles.ACTIONS)."""
        return allows(self.role, action)


class SignInFailure(Base):
    __tablename__ = "sign_in_failures"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    remote_addr: Mapped[str] = mapped_column(String(64))
    failed_at: Mapped[datetime] = mapped_column(Timestamp)
    # The email typed, lower case, cut to 255: which lockouts keep one person out.
    email: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (Index("ix_sign_in_failures_addr", "remote_addr", "failed_at"),)


class WorkerBeat(Base):
    """The last heartbeat of each worker process, written once per tick."""

    __tablename__ = "workers"

    worker_id: Mapped[str] = mapped_column(Key, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(Timestamp)
    last_seen_at: Mapped[datetime] = mapped_column(Timestamp, index=True)
    sent: Mapped[int] = mapped_column(BigInteger, default=0)
    # Why this worker's sending fails (the server's or the settings' fault), and since
    # when; cleared once a send succeeds.
    fault: Mapped[str | None] = mapped_column(Text)
    fault_since: Mapped[datetime | None] = mapped_column(Timestamp)


class AttemptHour(Base):
    """Sent and failed attempts of one settled hour, counted once for the dashboard's chart."""

    __tablename__ = "attempt_hours"

    hour_at: Mapped[datetime] = mapped_column(Timestamp, primary_key=True)
    sent: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    counted_at: Mapped[datetime] = mapped_column(Timestamp)


class StatusCount(Base):
    """Messages in one status, counted in full by a worker now and then.

    The pages count each status live only up to a cap; past it they show this count
    and its age instead of scanning millions of index entries on every view.
    """

    __tablename__ = "status_counts"

    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    messages: Mapped[int] = mapped_column(BigInteger)
    counted_at: Mapped[datetime] = mapped_column(Timestamp)


class AuditEvent(Base):
    """One change made by a person, a token or the CLI: who, what, which message, when, whence."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    actor: Mapped[str] = mapped_column(String(255))  # an email, "token:NAME" or "cli:OSUSER"
    action: Mapped[str] = mapped_column(String(64))
    # No foreign key: the trail outlives purged messages.
    message_pk: Mapped[int | None] = mapped_column(BigInteger)
    remote_addr: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_audit_events_message", "message_pk", "id"),
        Index("ix_audit_events_actor", "actor", "id"),
        Index("ix_audit_events_action", "action", "id"),
    )


class RetentionRun(Base):
    """When the daily purge last ran: the worker whose UPDATE moves it on runs the next."""

    __tablename__ = "retention_runs"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    last_run_at: Mapped[datetime | None] = mapped_column(Timestamp)


class Pause(Base):
    """Sending paused: while its one row (id 1) is there, no worker claims a message."""

    __tablename__ = "pause"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    paused_at: Mapped[datetime] = mapped_column(Timestamp)
    paused_by: Mapped[str] = mapped_column(String(255))  # staff email, or "cli (<OS user>)"
    reason: Mapped[str | None] = mapped_column(Text)


# Set up the relationships now rather than at the first query or constructor call:
# queue builds stored Messages as the ORM loads them, without __init__, which is what
# would otherwise trigger it.
configure_mappers()
