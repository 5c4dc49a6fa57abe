"""The guardrails' rows: outcomes counted per hour, sending domain and stream, and domain pauses."""

from datetime import datetime

from sqlalchemy import Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from outbox.core.streams import STREAM_CHARS
from outbox.models.db import Base
from outbox.models.types import Timestamp

DOMAIN_CHARS = 253  # a DNS name, A-labels


class GuardrailHour(Base):
    """The recipients sent, refused, bounced and complained of one hour's mail from one
    sending domain in one stream, added to as the outcomes are recorded."""

    __tablename__ = "guardrail_hours"

    hour_at: Mapped[datetime] = mapped_column(Timestamp, primary_key=True)
    domain: Mapped[str] = mapped_column(String(DOMAIN_CHARS), primary_key=True)
    stream: Mapped[str] = mapped_column(String(STREAM_CHARS), primary_key=True)
    sent: Mapped[int] = mapped_column(Integer, default=0)
    refused: Mapped[int] = mapped_column(Integer, default=0)
    bounced: Mapped[int] = mapped_column(Integer, default=0)
    complained: Mapped[int] = mapped_column(Integer, default=0)


class DomainPause(Base):
    """A sending domain whose broadcast mail a guardrail stopped: paused while paused_at is set.

    The row stays after a resume: counts_from keeps the rates that tripped it from
    tripping it again.
    """

    __tablename__ = "domain_pauses"

    domain: Mapped[str] = mapped_column(String(DOMAIN_CHARS), primary_key=True)
    paused_at: Mapped[datetime | None] = mapped_column(Timestamp)
    stream: Mapped[str | None] = mapped_column(String(STREAM_CHARS))  # whose rate tripped it
    kind: Mapped[str | None] = mapped_column(String(16))  # bounces, complaints, refusals
    span: Mapped[str | None] = mapped_column(String(8))  # the window: 24h, 7d
    rate: Mapped[float | None] = mapped_column(Float)  # per cent
    threshold: Mapped[float | None] = mapped_column(Float)  # per cent
    recipients: Mapped[int | None] = mapped_column(Integer)  # the rate's denominator
    reason: Mapped[str | None] = mapped_column(Text)
    resumed_at: Mapped[datetime | None] = mapped_column(Timestamp)
    resumed_by: Mapped[str | None] = mapped_column(String(255))
    # Only outcomes of hours starting at or after this count toward a new trip.
    counts_from: Mapped[datetime | None] = mapped_column(Timestamp)
