"""The staff's side: accounts, sign-in failures, API tokens and the audit trail."""

import hmac
from datetime import datetime

from flask import current_app
from flask_login import UserMixin
from sqlalchemy import BigInteger, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from outbox.core.roles import ALL_SCOPES, allows
from outbox.models.db import Base
from outbox.models.types import Id, Key, Timestamp, utcnow


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(Key, unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # What the token may do, space-separated (outbox.roles.SCOPES); all of them by default.
    scopes: Mapped[str] = mapped_column(String(64), default=ALL_SCOPES)


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
        """The session's user id, bound to the password and sign-outs: each ends old sessions.

        The password's part is an HMAC of its hash under the app's secret key: a session
        cookie is signed, not encrypted, and tells its reader nothing of the hash.
        """
        key = str(current_app.config["SECRET_KEY"]).encode()
        stamp = hmac.new(key, self.password_hash.encode(), "sha256").hexdigest()[:32]
        return f"{self.id}.{stamp}.{self.session_generation or 0}"

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
