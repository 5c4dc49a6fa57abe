"""Mail the capture transport kept instead of sending: its envelope and its bytes as they'd go."""

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, LargeBinary, String
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Id, Timestamp, utcnow

# A captured mail is one piece, attachments and all: MEDIUMBLOB's 16 MiB could be short.
WireBytes = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


class Captured(Base):
    """One delivery the capture transport took in place of an SMTP server (OUTBOX_DELIVERY)."""

    __tablename__ = "captured"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    message_pk: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    sender: Mapped[str] = mapped_column(String(998))  # MAIL FROM as it would go on the wire
    recipients: Mapped[list[str]] = mapped_column(JSON)  # RCPT TO addresses, in order
    raw: Mapped[bytes] = mapped_column(WireBytes)  # the DATA, DKIM-signed, before dot-stuffing
