"""The suppression list: addresses never sent to, why, since when, until when, and the evidence."""

from datetime import datetime

from sqlalchemy import BigInteger, Index, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Id, Timestamp, utcnow

# The matching key (outbox.suppression.key_of): a local part (at most 64 octets, kept
# exact) and a domain of A-labels (at most 253). Compared exactly: MySQL's default
# collation would fold case, and Ann@ is not ann@.
AddressKey = String(320).with_variant(
    mysql.VARCHAR(320, collation="utf8mb4_bin"), "mysql", "mariadb"
)


class Suppression(Base):
    __tablename__ = "suppressions"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    address: Mapped[str] = mapped_column(String(998))  # as given
    key: Mapped[str] = mapped_column(AddressKey, unique=True)
    reason: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))  # bounce, smtp, manual, import
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(Timestamp)  # None: for good
    created_by: Mapped[str] = mapped_column(String(255))
    # The evidence. No foreign keys: an entry outlives the purge of its message or bounce.
    message_pk: Mapped[int | None] = mapped_column(BigInteger)
    bounce_pk: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_suppressions_expires", "expires_at"),)
