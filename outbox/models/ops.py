"""The workers' bookkeeping: heartbeats, counts for the dashboard, the daily purge, the pause,
the wake-ups of staff moves."""

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Key, Timestamp


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


class StreamHour(Base):
    """Messages of one stream that ended sent or failed in one settled hour, and the
    queue-to-250 of those sent, counted once for the dashboard's charts."""

    __tablename__ = "stream_hours"

    hour_at: Mapped[datetime] = mapped_column(Timestamp, primary_key=True)
    stream: Mapped[str] = mapped_column(String(16), primary_key=True)
    sent: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    p50_ms: Mapped[int | None] = mapped_column(Integer)  # None: none was sent
    p95_ms: Mapped[int | None] = mapped_column(Integer)
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


class Wake(Base):
    """How many staff moves have made messages due now (queue.wakeups.wake), in one row:
    idle workers that probe watch it beside the newest message id."""

    __tablename__ = "wakes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    moves: Mapped[int] = mapped_column(BigInteger, default=0)
