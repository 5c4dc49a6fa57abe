"""The throttles: one token bucket per route and per recipient domain, shared by every worker."""

from datetime import datetime

from sqlalchemy import Double, String
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Timestamp

# "route:<name>", "domain:<A-labels>" or "domain:*": a domain is at most 253 octets.
BucketName = String(300).with_variant(
    mysql.VARCHAR(300, collation="utf8mb4_bin"), "mysql", "mariadb"
)


class Throttle(Base):
    """A token bucket (outbox.throttle.buckets): made on first use, never deleted."""

    __tablename__ = "throttles"

    name: Mapped[str] = mapped_column(BucketName, primary_key=True)
    rate: Mapped[float] = mapped_column(Double)  # mails a second, as configured
    burst: Mapped[float] = mapped_column(Double)  # the bucket's size at the configured rate
    tokens: Mapped[float] = mapped_column(Double)  # as of updated_at
    updated_at: Mapped[datetime] = mapped_column(Timestamp)
    # The slow-down after a 421 or 4.7.x: the rate is rate * factor, recovering step by
    # step from slowed_at; reason is the reply that caused it.
    factor: Mapped[float] = mapped_column(Double, default=1.0)
    slowed_at: Mapped[datetime | None] = mapped_column(Timestamp)
    reason: Mapped[str | None] = mapped_column(String(500))
    # Messages held back for this bucket were given turns up to here.
    held_until: Mapped[datetime | None] = mapped_column(Timestamp)
