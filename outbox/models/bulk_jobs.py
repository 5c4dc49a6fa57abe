"""The rows of bulk jobs: a move (resend or cancel) over every message a filter finds."""

from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Id, Timestamp


class BulkJob(Base):
    """One move over the messages of a filter (core.filters, as JSON) up to the id ceiling
    fixed when it was asked for, done by workers in batches by id.

    A worker holds it while lease_until is ahead; last_id is the highest id a committed
    batch reached, so a job whose worker died goes on from there once its lease is over.
    """

    __tablename__ = "bulk_jobs"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    move: Mapped[str] = mapped_column(String(16))  # resend, cancel
    filter: Mapped[str] = mapped_column(Text)  # core.filters.Filter.to_json, times fixed
    state: Mapped[str] = mapped_column(String(16))  # queued, running, done, failed
    ceiling: Mapped[int] = mapped_column(BigInteger)  # the highest message id when asked
    last_id: Mapped[int] = mapped_column(BigInteger, default=0)
    total: Mapped[int | None] = mapped_column(
        Integer
    )  # matching and movable, counted at first claim
    moved: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    asked_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    started_at: Mapped[datetime | None] = mapped_column(Timestamp)
    finished_at: Mapped[datetime | None] = mapped_column(Timestamp)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    lease_until: Mapped[datetime | None] = mapped_column(Timestamp)
    last_error: Mapped[str | None] = mapped_column(Text)


Index("ix_bulk_jobs_state", BulkJob.state, BulkJob.id)
