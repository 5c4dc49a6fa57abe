"""Bulk jobs: resend or cancel every message a filter finds, in batches a worker runs.

Safe against a list that changes while a job runs:
- the highest message id when staff asked is the job's ceiling: messages stored later
  are never swept in, whatever they look like;
- each batch moves its rows through the queue's guarded verbs, whose UPDATE names the
  statuses the move is allowed from: a row that moved meanwhile is left as it is and
  counted as skipped;
- each batch commits the rows it moved and the job's progress (last_id, the counts, the
  lease) in one transaction, so a worker that dies loses nothing and repeats nothing:
  once its lease is over another worker (or itself, restarted) goes on from last_id.
"""

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from threading import Event
from typing import Any, cast

from sqlalchemy import Table, and_, or_, select, update

from outbox import queue
from outbox.auth import audit
from outbox.core.filters import Filter
from outbox.core.status import Status, sources
from outbox.models import BulkJob, utcnow
from outbox.models.db import db
from outbox.ops import reports

log = logging.getLogger("outbox.worker")

BATCH = 1_000  # messages moved per transaction
LEASE = timedelta(seconds=60)  # how long a worker holds a job without a batch committed
# Each move: the statuses it takes a message from, and how the page words what it did.
MOVES: dict[str, tuple[tuple[Status, ...], str]] = {
    "resend": ((Status.FAILED, Status.CANCELLED), "queued again"),
    "cancel": (tuple(sources(Status.CANCELLED)), "cancelled"),
}
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
JOBS_TABLE = cast(Table, BulkJob.__table__)
JOBS = JOBS_TABLE.c


class LeaseLost(Exception):
    """Another worker took the job over (this one's lease ran out): the batch is undone."""


def statuses(move: str) -> tuple[Status, ...]:
    return MOVES[move][0]


def start(move: str, f: Filter, asked_by: str, now: datetime | None = None) -> BulkJob:
    """A queued job for the messages the filter finds now (times fixed, ids up to the
    highest now); audited; committed."""
    if move not in MOVES:
        raise ValueError(f"move must be one of {', '.join(MOVES)}")
    now = now or utcnow()
    fixed = f.fixed(now)
    job = BulkJob(move=move, filter=fixed.to_json(), state=QUEUED,
                  ceiling=reports.highest_id(), last_id=0, moved=0, skipped=0,
                  asked_by=asked_by[:255], created_at=now)  # fmt: skip
    db.session.add(job)
    db.session.flush()
    detail = {"job": job.id, "filter": fixed.spelled(), "status": fixed.status,
              "ceiling": job.ceiling}  # fmt: skip
    audit.add(f"bulk_job_{move}", detail=detail)
    db.session.commit()
    return job


def job(job_id: int) -> BulkJob | None:
    """One job as it is now."""
    return db.session.execute(
        select(BulkJob).where(BulkJob.id == job_id).execution_options(populate_existing=True)
    ).scalar_one_or_none()


def recent(limit: int = 10) -> list[BulkJob]:
    """The latest jobs, newest first."""
    return list(db.session.scalars(select(BulkJob).order_by(BulkJob.id.desc()).limit(limit)))


def claim(worker_id: str, now: datetime | None = None) -> BulkJob | None:
    """The oldest job waiting, or running under a lease that is over, now held by this worker."""
    now = now or utcnow()
    takeable = or_(JOBS.state == QUEUED, and_(JOBS.state == RUNNING, JOBS.lease_until < now))
    waiting = list(db.session.scalars(select(JOBS.id).where(takeable).order_by(JOBS.id).limit(5)))
    for job_id in waiting:
        taken = db.session.execute(
            update(JOBS_TABLE)
            .where(JOBS.id == job_id, takeable)
            .values(state=RUNNING, worker_id=worker_id, lease_until=now + LEASE)
        )
        mine = getattr(taken, "rowcount", 0) == 1
        db.session.commit()
        if mine:
            return job(job_id)
    db.session.rollback()
    return None


def step(held: BulkJob, allowance: int, now: datetime | None = None) -> bool:
    """Move the next batch of a held job; False once it is done (and marked so)."""
    now = now or utcnow()
    f = Filter.from_json(held.filter)
    moves = statuses(held.move)
    if held.total is None:  # the first claim counts what the job is to move
        total = reports.movable_count(f, moves, held.ceiling, now=now).value
        _write(held, now, total=total, started_at=now)
    ids = reports.movable_ids(f, moves, held.last_id, held.ceiling, BATCH, now=now)
    if not ids:
        finish(held, now)
        return False
    last = held.last_id
    progress = _progress(held, last, max(ids), now)
    if held.move == "resend":
        queue.resend_many(ids, allowance, now, then=progress)
    else:
        queue.cancel_many(ids, then=progress)
    return True


def _progress(held: BulkJob, last: int, top: int, now: datetime) -> Callable[[queue.Moved], None]:
    """The job's progress, written in the batch's transaction while this worker holds it."""

    def write(moved: queue.Moved) -> None:
        mine = update(JOBS_TABLE).where(JOBS.id == held.id, JOBS.worker_id == held.worker_id,
                                               JOBS.last_id == last)  # fmt: skip
        result = db.session.execute(mine.values(
            last_id=top, moved=JOBS.moved + moved.done, skipped=JOBS.skipped + moved.skipped,
            lease_until=now + LEASE,
        ))  # fmt: skip
        if getattr(result, "rowcount", 0) != 1:
            raise LeaseLost(f"bulk job {held.id} was taken over")

    return write


def _write(held: BulkJob, now: datetime, **values: Any) -> None:
    """Some of a held job's columns; LeaseLost if another worker holds it now."""
    mine = update(JOBS_TABLE).where(JOBS.id == held.id, JOBS.worker_id == held.worker_id)
    values.setdefault("lease_until", now + LEASE)
    result = db.session.execute(mine.values(**values))
    if getattr(result, "rowcount", 0) != 1:
        db.session.rollback()
        raise LeaseLost(f"bulk job {held.id} was taken over")
    db.session.commit()
    db.session.refresh(held)


def finish(held: BulkJob, now: datetime) -> None:
    """Mark a job done: every matching message up to its ceiling was reached. Those it
    counted at the start and did not move are skipped: they changed status before their
    batch, or no recipient was left to send to; audited."""
    db.session.refresh(held)
    total = max(held.total or 0, held.moved)
    skipped = total - held.moved
    mine = update(JOBS_TABLE).where(JOBS.id == held.id, JOBS.worker_id == held.worker_id)
    marked = db.session.execute(mine.values(state=DONE, finished_at=now, lease_until=None,
                                            total=total, skipped=skipped))  # fmt: skip
    if getattr(marked, "rowcount", 0) != 1:
        db.session.rollback()
        raise LeaseLost(f"bulk job {held.id} was taken over")
    audit.add(f"bulk_job_{held.move}_done", detail={
        "job": held.id, "filter": Filter.from_json(held.filter).spelled(),
        "moved": held.moved, "skipped": skipped, "total": total, "asked_by": held.asked_by,
    })  # fmt: skip
    db.session.commit()


def fail(held: BulkJob, error: str, now: datetime | None = None) -> None:
    """Mark a job failed with the reason; audited."""
    db.session.rollback()
    mine = update(JOBS_TABLE).where(JOBS.id == held.id, JOBS.worker_id == held.worker_id)
    db.session.execute(mine.values(state=FAILED, finished_at=now or utcnow(), lease_until=None,
                                   last_error=error[:2000]))  # fmt: skip
    audit.add(f"bulk_job_{held.move}_failed", detail={"job": held.id, "error": error[:500]})
    db.session.commit()


def work(worker_id: str, allowance: int, stop: Event | None = None) -> int:
    """Run the jobs waiting, one at a time, batch after batch until done or stopped; how
    many batches were moved. A stopped job is let go at once for another worker."""
    batches = 0
    while (stop is None or not stop.is_set()) and (held := claim(worker_id)) is not None:
        try:
            Filter.from_json(held.filter)
        except (ValueError, TypeError) as exc:
            fail(held, f"the job's filter cannot be read: {exc}")
            continue
        try:
            while step(held, allowance):
                batches += 1
                if stop is not None and stop.is_set():
                    _write(held, utcnow(), lease_until=utcnow())
                    return batches
        except LeaseLost:
            db.session.rollback()
            log.warning("%s: bulk job %s was taken over by another worker", worker_id, held.id)
    return batches


def outcome(held: BulkJob) -> str:
    """What a finished job did, in words."""
    done_as = MOVES[held.move][1]
    words = f"{held.moved:,} message{'s' if held.moved != 1 else ''} {done_as}"
    if held.skipped:
        words += (f", {held.skipped:,} skipped: their status changed before the job reached "
                  f"them, or every recipient is on the suppression list")  # fmt: skip
    return words + "."
