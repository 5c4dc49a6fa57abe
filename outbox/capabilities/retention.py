"""Retention: purging old settled messages and dropping their bodies, in small batches.

Only settled messages (sent, failed, cancelled) are touched, found by settled_at
(ix_messages_settled, ix_messages_bodies: range scans). Each batch selects at most
BATCH ids, then deletes or updates by those primary keys and commits, so no lock is
held for long and no range (gap, next-key) lock is taken on MariaDB: the workers'
claims go on beside it. Attempts go with their messages; the dashboard's chart keeps
its history in attempt_hours (rolled up first), and the chart's 24 hours are younger
than the shortest retention (one day).
"""

import logging
import time
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, cast

from flask import current_app
from sqlalchemy import Table, delete, func, select, update

from outbox.auth import audit
from outbox.capabilities import suppression, webhooks
from outbox.capabilities.bounces import store as bounce_store
from outbox.capabilities.capture import store as captured
from outbox.capabilities.mailings import purge as mailings
from outbox.core.config_schema import INT, Group, Setting
from outbox.models import (
    Attachment,
    AttachmentChunk,
    Attempt,
    Message,
    RawChunk,
    RetentionRun,
    utcnow,
)
from outbox.models.db import db
from outbox.ops import rollups
from outbox.queue import moves
from outbox.queue.moves import SETTLED

log = logging.getLogger("outbox.retention")


def check_settings(config: Any) -> None:
    """ValueError if the retention times are negative, or bodies would outlive messages."""
    keep, body = config["RETENTION_DAYS"], config["RETENTION_BODY_DAYS"]
    if keep < 0 or body < 0 or config["AUDIT_RETENTION_DAYS"] < 0:
        raise ValueError("RETENTION_DAYS, RETENTION_BODY_DAYS and AUDIT_RETENTION_DAYS are 0 "
                         "(keep for good) or more")  # fmt: skip
    if keep and (not body or body > keep):
        raise ValueError("RETENTION_BODY_DAYS must be 1 to RETENTION_DAYS when RETENTION_DAYS "
                         "is set: bodies cannot outlive their messages")  # fmt: skip


# fmt: off
GROUP = Group(
    "Retention",
    "How long settled messages, their bodies and the audit trail are kept (see Retention).",
    (
        Setting("RETENTION_DAYS", INT, 90, unit="days",
                description="days after settling (sent, failed, cancelled) that a message goes "
                "with its attempts and attachments; `0` keeps messages for good (see Retention)"),
        Setting("RETENTION_BODY_DAYS", INT, 30, unit="days",
                description="days after settling that a message's bodies and attachments are "
                "dropped (the row stays, marked); at most `OUTBOX_RETENTION_DAYS`; `0` keeps them"),
        Setting("AUDIT_RETENTION_DAYS", INT, 365, unit="days",
                description="days the audit trail's events are kept before the purge removes "
                "them; `0` keeps them for good"),
    ),
    check_settings,
)
# fmt: on

MESSAGES = cast(Table, Message.__table__)
ATTEMPTS = cast(Table, Attempt.__table__)
ATTACHMENTS = cast(Table, Attachment.__table__)
CHUNKS = cast(Table, AttachmentChunk.__table__)
RAW = cast(Table, RawChunk.__table__)  # submission: mails stored as they came
RUNS = cast(Table, RetentionRun.__table__)
BATCH = 500  # ids per transaction
# The workers' daily purge rests this many times as long as each batch took, so it takes
# at most a tenth of the database's time from sending (bench/purge.py); by hand, none.
WORKER_PACE = 9.0
EVERY = timedelta(days=1)  # how often the workers purge
SETTLED_VALUES = [s.value for s in SETTLED]


@dataclass
class Purged:
    """What a purge removed (or, on a dry run, would remove)."""

    messages: int = 0
    attempts: int = 0
    attachments: int = 0
    bodies_dropped: int = 0
    audit_events: int = 0
    mailings: int = 0  # mailings whose every recipient's row is gone

    def add(self, other: "Purged") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def __str__(self) -> str:
        said = (f"{self.messages} messages, {self.attempts} attempts, "
                f"{self.attachments} attachments removed; "
                f"bodies dropped from {self.bodies_dropped} messages")  # fmt: skip
        if self.mailings:
            said += f"; {self.mailings} mailings removed"
        if self.audit_events:
            said += f"; {self.audit_events} audit events removed"
        return said

    def __bool__(self) -> bool:
        return bool(self.messages or self.bodies_dropped or self.audit_events or self.mailings)


def cutoffs(now: datetime, days: int | None = None) -> tuple[datetime | None, datetime | None]:
    """Before when settled messages go, and before when their bodies go (None: kept).

    days (outbox purge --older-than) stands for RETENTION_DAYS; the bodies' rule is
    BODY_DAYS, or days itself if that is shorter. 0 turns a rule off.
    """
    config = current_app.config
    keep = config["RETENTION_DAYS"] if days is None else days
    body = config["RETENTION_BODY_DAYS"]
    if keep and body:
        body = min(body, keep)
    return (now - timedelta(days=keep) if keep else None,
            now - timedelta(days=body) if body else None)  # fmt: skip


def purge(
    now: datetime | None = None, days: int | None = None, dry_run: bool = False, pace: float = 0
) -> Purged:
    """Remove settled messages older than the cutoff and drop the bodies of younger ones.

    A dry run counts what would go, changing nothing. After each batch the purge rests
    pace times as long as the batch took.
    """
    now = now or utcnow()
    if days is not None and days < 1:
        raise ValueError("--older-than is at least 1 day: the dashboard's chart shows 24 hours")
    gone, bodies = cutoffs(now, days)
    trail = current_app.config["AUDIT_RETENTION_DAYS"]
    trail_cutoff = now - timedelta(days=trail) if trail else None
    if dry_run:
        found = _count(gone, bodies)
        if trail_cutoff is not None:
            found.audit_events = audit.purge_old(trail_cutoff, dry_run=True)
        return found
    rollups.roll_up_hours(now)  # the chart's settled hours are kept before any attempt goes
    done = Purged()
    if gone is not None:
        done.add(_in_batches(_old(gone), _remove, pace))
        done.mailings = mailings.purge_old(gone)  # their bodies, once no recipient's row is left
        suppression.purge_old(gone)  # suppression: entries expired before the cutoff
        bounce_store.purge_old(gone)  # bounces: bounce mails as old as those
        webhooks.purge_old(gone)  # webhooks: deliveries as old as the messages gone
    if bodies is not None:
        done.add(_in_batches(_with_bodies(bodies), _drop_bodies(now), pace))
    if trail_cutoff is not None:
        done.audit_events = audit.purge_old(trail_cutoff)
    if done:  # by hand or a worker's daily turn ("cli:...")
        audit.record("purge", detail=str(done))
    return done


def _old(cutoff: datetime) -> Any:
    c = MESSAGES.c
    return select(c.id).where(c.settled_at < cutoff, c.status.in_(SETTLED_VALUES))


def _with_bodies(cutoff: datetime, gone: datetime | None = None) -> Any:
    c = MESSAGES.c
    chosen = select(c.id).where(
        c.bodies_dropped_at.is_(None), c.settled_at < cutoff, c.status.in_(SETTLED_VALUES)
    )
    return chosen if gone is None else chosen.where(c.settled_at >= gone)


def _count(gone: datetime | None, bodies: datetime | None) -> Purged:
    """What purge would do with these cutoffs, counted in one read each."""
    found = Purged()
    if gone is not None:
        ids = _old(gone).subquery()
        found.messages = _rows(select(func.count()).select_from(ids))
        found.attempts = _rows(_of(ATTEMPTS, ids))
        found.attachments = _rows(_of(ATTACHMENTS, ids))
        found.mailings = mailings.count_old(gone)
    if bodies is not None:
        ids = _with_bodies(bodies, gone).subquery()
        found.bodies_dropped = _rows(select(func.count()).select_from(ids))
        found.attachments += _rows(_of(ATTACHMENTS, ids))
    db.session.commit()
    return found


def _of(table: Table, ids: Any) -> Any:
    return select(func.count()).where(table.c.message_pk.in_(select(ids.c.id)))


def _rows(stmt: Any) -> int:
    return int(db.session.scalar(stmt) or 0)


def _in_batches(chosen: Any, act: Any, pace: float) -> Purged:
    """Run act on the chosen ids BATCH at a time, each batch in its own transaction.

    What act does takes its rows out of the choice (gone, or marked), so each batch
    reads from the front of the index range again; a batch that changes nothing ends it.
    """
    done = Purged()
    while True:
        began = time.monotonic()
        ids = list(db.session.scalars(chosen.order_by(MESSAGES.c.settled_at).limit(BATCH)))
        if not ids:
            db.session.commit()
            return done
        batch = act(ids)
        db.session.commit()
        done.add(batch)
        if not (batch.messages or batch.bodies_dropped):
            return done
        if pace:
            time.sleep((time.monotonic() - began) * pace)


def _attachment_ids(ids: list[int]) -> list[int]:
    stmt = select(ATTACHMENTS.c.id).where(ATTACHMENTS.c.message_pk.in_(ids))
    return list(db.session.scalars(stmt))


def _remove_attachments(attachments: list[int]) -> None:
    if attachments:
        db.session.execute(delete(CHUNKS).where(CHUNKS.c.attachment_id.in_(attachments)))
        db.session.execute(delete(ATTACHMENTS).where(ATTACHMENTS.c.id.in_(attachments)))


def _remove_raw(ids: list[int]) -> None:
    """The stored bytes of those of these raw mails still settled (one resent keeps its own)."""
    settled = select(MESSAGES.c.id).where(
        MESSAGES.c.id.in_(ids), MESSAGES.c.status.in_(SETTLED_VALUES)
    )
    db.session.execute(delete(RAW).where(RAW.c.message_pk.in_(settled)))


def _remove(ids: list[int]) -> Purged:
    """Delete these messages with their attempts and attachments, by primary keys."""
    attachments = _attachment_ids(ids)
    attempts = list(db.session.scalars(select(ATTEMPTS.c.id).where(ATTEMPTS.c.message_pk.in_(ids))))
    _remove_attachments(attachments)
    _remove_raw(ids)
    captured.remove_of(ids)  # capture: the copies kept instead of sending
    if attempts:
        db.session.execute(delete(ATTEMPTS).where(ATTEMPTS.c.id.in_(attempts)))
    if db.engine.dialect.name == "sqlite":  # no ON DELETE SET NULL without its pragma
        moves.forget_originals(ids)
    guard = MESSAGES.c.status.in_(SETTLED_VALUES)  # resent since chosen: it stays
    result: Any = db.session.execute(delete(MESSAGES).where(MESSAGES.c.id.in_(ids), guard))
    return Purged(result.rowcount, len(attempts), len(attachments))


def _drop_bodies(now: datetime) -> Any:
    def drop(ids: list[int]) -> Purged:
        """Empty these messages' bodies and remove their attachments; the rows stay, marked."""
        attachments = _attachment_ids(ids)
        _remove_attachments(attachments)
        _remove_raw(ids)
        captured.remove_of(ids)  # a captured copy is the body as it went
        dropped = moves.drop_bodies(ids, now)  # not a move: the status stays
        return Purged(attachments=len(attachments), bodies_dropped=dropped)

    return drop


def any_rule() -> bool:
    """True if any retention setting asks for a purge (a number of days above 0)."""
    config = current_app.config
    return any(config[name] for name in ("RETENTION_DAYS", "RETENTION_BODY_DAYS",
                                         "AUDIT_RETENTION_DAYS"))  # fmt: skip


def take_turn(now: datetime, name: str = "purge", every: timedelta = EVERY) -> bool:
    """Whether this worker runs the daily purge (or the job `name`, once `every`): the one
    whose UPDATE moves last_run_at on.

    The row is made once if missing (a second maker's insert does nothing); the UPDATE
    is atomic, so of several workers finding it due exactly one changes it.
    """
    with db.engine.begin() as conn:  # its own short transaction
        conn.execute(rollups._upsert(RUNS, replace=False), [{"name": name, "last_run_at": None}])
    with db.engine.begin() as conn:
        due = (RUNS.c.last_run_at.is_(None)) | (RUNS.c.last_run_at <= now - every)
        stmt = update(RUNS).where(RUNS.c.name == name, due).values(last_run_at=now)
        return cast(Any, conn.execute(stmt)).rowcount == 1


def purge_if_due(worker_id: str) -> Purged | None:
    """The workers' daily purge, by the first whose turn comes; quick when not due.

    A failure is logged, not raised: the next day's purge takes what is left.
    """
    if not any_rule():
        return None
    try:
        now = utcnow()
        if not take_turn(now):
            return None
        done = purge(now, pace=WORKER_PACE)
        log.info("%s: retention purge: %s", worker_id, done, extra={"worker_id": worker_id})
        return done
    except Exception:
        db.session.rollback()
        log.exception("%s: retention purge failed", worker_id, extra={"worker_id": worker_id})
        return None
