"""Worker heartbeats: each worker says it is alive once per tick."""

import os
import socket
from datetime import datetime, timedelta

from sqlalchemy import case, select, update

from outbox.models import WorkerBeat, utcnow
from outbox.models.db import db


def beat(worker_id: str, started_at: datetime, sent: int, now: datetime | None = None) -> None:
    """Record that the worker is alive and has sent `sent` more messages since its last beat."""
    now = now or utcnow()
    stmt = (
        update(WorkerBeat)
        .where(WorkerBeat.worker_id == worker_id)
        .values(last_seen_at=now, sent=WorkerBeat.sent + sent)
    )
    if db.session.execute(stmt).rowcount == 0:  # type: ignore[attr-defined]
        db.session.add(
            WorkerBeat(
                worker_id=worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                started_at=started_at,
                last_seen_at=now,
                sent=sent,
            )
        )
    db.session.commit()


def fault(worker_id: str, started_at: datetime, error: str | None) -> bool:
    """Put on record that the worker's sending fails with error (None: works again).

    Returns whether a fault is now on record. The first failure's time is kept while it
    goes on failing, whatever the error says each time.
    """
    beat(worker_id, started_at, 0)
    since: object = None
    if error:
        since = case((WorkerBeat.fault_since.is_(None), utcnow()), else_=WorkerBeat.fault_since)
    stmt = update(WorkerBeat).where(WorkerBeat.worker_id == worker_id)
    db.session.execute(stmt.values(fault=error, fault_since=since))
    db.session.commit()
    return error is not None


def seen_since(moment: datetime) -> list[WorkerBeat]:
    """Workers whose last beat came after moment, most recent first."""
    stmt = select(WorkerBeat).where(WorkerBeat.last_seen_at >= moment)
    return list(db.session.execute(stmt.order_by(WorkerBeat.last_seen_at.desc())).scalars())


def recent(now: datetime | None = None) -> list[WorkerBeat]:
    """Workers seen within the last day."""
    return seen_since((now or utcnow()) - timedelta(days=1))
