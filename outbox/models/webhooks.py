"""The webhooks' tables: the endpoints apps registered, and one delivery per endpoint per event."""

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Id, Key, LongText, Timestamp, utcnow

# A receiver's answer is kept up to this many characters, for the endpoint's page.
RESPONSE_CHARS = 500


class WebhookEndpoint(Base):
    """A URL that is told about events, with the secret its deliveries are signed with."""

    __tablename__ = "webhook_endpoints"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    url: Mapped[str] = mapped_column(String(2000))
    # The kinds it takes (outbox.events.KINDS), space-separated.
    events: Mapped[str] = mapped_column(String(255))
    # "whsec_" and base64, as the Standard Webhooks specification says; kept so that
    # outbox can sign, shown to people only once, at creation.
    secret: Mapped[str] = mapped_column(String(255))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled_at: Mapped[datetime | None] = mapped_column(Timestamp)
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    created_by: Mapped[str] = mapped_column(String(255))

    def takes(self, kind: str) -> bool:
        return kind in self.events.split()


class WebhookDelivery(Base):
    """One event for one endpoint: its signed body, where it stands, and the last answer.

    No foreign key to the endpoint: emit() reads the endpoints and inserts in the
    worker's recording transaction, and an endpoint deleted between the two must not
    fail that transaction. Removing an endpoint removes its deliveries.
    """

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(BigInteger)
    event_id: Mapped[str] = mapped_column(Key)  # the webhook-id header: the same on a retry
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[str] = mapped_column(LongText)  # the JSON body exactly as signed and sent
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(Timestamp)
    locked_by: Mapped[str | None] = mapped_column(String(255))
    locked_at: Mapped[datetime | None] = mapped_column(Timestamp)
    last_attempt_at: Mapped[datetime | None] = mapped_column(Timestamp)
    response_code: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    response: Mapped[str | None] = mapped_column(String(RESPONSE_CHARS))  # its start, cut
    error: Mapped[str | None] = mapped_column(Text)  # why the last attempt failed
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)

    __table_args__ = (
        UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_event"),
        # The claim: due rows of one status in due order, a range scan.
        Index("ix_webhook_deliveries_claim", "status", "next_attempt_at", "id"),
        Index("ix_webhook_deliveries_endpoint", "endpoint_id", "id"),  # an endpoint's page
        Index("ix_webhook_deliveries_created", "created_at"),  # the retention purge
    )
