"""Each SMTP route's health, as the workers saw it: the last success, the last fault, since when."""

from datetime import datetime

from sqlalchemy import Integer, Text
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Key, Timestamp

# A route's name (routes.config.NAME) as attempts.route and route_health.name hold it.
ROUTE_CHARS = 64


class RouteHealth(Base):
    """One route's health over all workers: written by routes.health.note, read by the pages."""

    __tablename__ = "route_health"

    name: Mapped[str] = mapped_column(Key, primary_key=True)
    ok_at: Mapped[datetime | None] = mapped_column(Timestamp)  # the last send it took
    fault_at: Mapped[datetime | None] = mapped_column(Timestamp)  # the last transport fault
    fault: Mapped[str | None] = mapped_column(Text)  # what that fault was
    # Faults noted since the last success (0: up), and when the first of them came.
    faults: Mapped[int] = mapped_column(Integer, default=0)
    failing_since: Mapped[datetime | None] = mapped_column(Timestamp)
    noted_at: Mapped[datetime] = mapped_column(Timestamp)  # the last write, by any worker
