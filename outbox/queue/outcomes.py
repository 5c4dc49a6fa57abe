"""Recording what came of a worker's attempts: the outcomes of its claims, and dead workers'."""

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Executable, bindparam, case, insert, select

from outbox.core.recipients import Recipient
from outbox.core.status import Outcome, Retry, Status
from outbox.models import REPLY_CHARS, utcnow
from outbox.models.db import db
from outbox.queue import hooks
from outbox.queue.claims import Claim
from outbox.queue.moves import ATTEMPTS, MESSAGES, changed, guarded


@dataclass(frozen=True)
class Finished:
    """What one attempt came to, waiting to be recorded with others of its batch."""

    claim: Claim
    outcome: Outcome
    finished_at: datetime
    code: int | None = None
    error: str | None = None
    # The recipients column as the attempt left it (deliveries.settle); None: unchanged.
    recipients: list[Recipient] | None = None
    # The server's or the settings' fault: deferred on the retry schedule, but the
    # attempt is added to the message's allowance, so such faults never fail it.
    fault: bool = False
    reply: str | None = None  # the server's words when it took the mail
    route: str | None = None  # the name of the route the attempt went through
    queued_at: datetime | None = None  # when the message was stored (its created_at)


def record(finished: Sequence[Finished], retry: Retry | None = None) -> dict[int, Status]:
    """Record the outcomes of some of one worker's claims in one transaction; commit.

    Returns the new status of each message recorded. A message left out was no
    longer this worker's claim (taken back as stale), and nothing was written for it.
    A few statements for the whole group instead of an UPDATE, an INSERT and a COMMIT
    per message: the per-message commit was most of a worker's time. The statements
    are built once for each shape of group and reused with new values: building a
    CASE of twenty rows afresh cost more CPU than sending the twenty mails.
    """
    if not finished:
        return {}
    worker_id = finished[0].claim.worker_id
    moves: Moves = {}
    for done in finished:
        if done.claim.worker_id != worker_id:
            raise ValueError("record() takes one worker's outcomes at a time")
        new, outcome, error = _settles(done)
        shape = Shape(new, done.recipients is not None, done.fault)
        moves.setdefault(shape, []).append((done, outcome, error))
    returning = bool(db.engine.dialect.update_returning)
    recorded = _record_moves(moves, worker_id, retry, returning=returning)
    if recorded is None:
        # MariaDB/MySQL, no RETURNING: an UPDATE changed fewer rows than it was given,
        # so a claim had passed to another worker. Undo, lock the rows still held and
        # read which they are, then again. (Most groups are wholly held: this saves
        # the locking read on all of those.)
        db.session.rollback()
        ids = [done.claim.id for done in finished]
        held = set(db.session.scalars(_held_rows(), {"ids": ids, "worker": worker_id}))
        recorded = _record_moves(moves, worker_id, retry, held=held)
        if recorded is None:  # locked: all of them must move
            raise RuntimeError("locked messages did not move")
    attempts = [
        {
            "message_pk": done.claim.id,
            "started_at": done.claim.started_at,
            "finished_at": done.finished_at,
            "worker_id": worker_id,
            "outcome": outcome.value,
            "smtp_code": done.code,
            "error": error,
            "reply": done.reply[:REPLY_CHARS] if done.reply else None,
            "route": done.route,
        }
        for group in moves.values()
        for done, outcome, error in group
        if done.claim.id in recorded
    ]
    if attempts:
        db.session.execute(insert(ATTEMPTS), attempts)
    errors = [(done, error) for group in moves.values() for done, _, error in group]
    hooks.written(hooks.Written(finished, errors, recorded))  # suppression, events, bounces
    db.session.commit()
    return recorded


@dataclass(frozen=True)
class Shape:
    """What the UPDATE of a group of outcomes writes: the new status, and whether it
    writes each row's recipients and counts the attempt."""

    new: Status
    recipients: bool = False
    fault: bool = False  # the attempt is added to the allowance as well


Moves = dict[Shape, list[tuple["Finished", Outcome, str | None]]]


def _record_moves(
    moves: Moves, worker_id: str, retry: Retry | None, *,
    returning: bool = False, held: set[int] | None = None,
) -> dict[int, Status] | None:  # fmt: skip
    """Move each group's messages still claimed by worker_id (those in held, if given).

    Returns each moved message's new status, or None when, without RETURNING, an
    UPDATE changed fewer rows than it was given.
    """
    recorded: dict[int, Status] = {}
    for shape, group in moves.items():
        new = shape.new
        rows = [row for row in group if held is None or row[0].claim.id in held]
        if not rows:
            continue
        errors = {error for _, _, error in rows}
        shared = errors.pop() if len(errors) == 1 else _PER_ROW
        stmt = _outcome_update(shape, len(rows), returning, shared is _PER_ROW)
        values: dict[str, object] = {"worker": worker_id, "error": shared}
        for n, (done, _, error) in enumerate(rows):
            values[f"id{n}"] = done.claim.id
            values[f"at{n}"] = done.finished_at
            values[f"error{n}"] = error
            if shape.recipients:
                values[f"recipients{n}"] = done.recipients
            if new is Status.DEFERRED:
                if retry is None:
                    raise ValueError("recording a deferral needs the retry schedule")
                values[f"due{n}"] = retry.after(done.claim.attempts + 1, done.finished_at)
        result = db.session.execute(stmt, values)
        if returning:
            recorded.update(dict.fromkeys(result.scalars(), new))
        elif cast(CursorResult[Any], result).rowcount != len(rows):
            return None
        else:
            recorded.update((done.claim.id, new) for done, _, _ in rows)
    return recorded


_PER_ROW = object()  # the rows' errors differ: each gets its own


@functools.cache
def _held_rows() -> Executable:
    """Lock and list the given ids still claimed by the given worker."""
    ids: Any = bindparam("ids", expanding=True)
    c = MESSAGES.c
    guard = (c.status == Status.SENDING.value, c.locked_by == bindparam("worker"))
    return select(c.id).where(c.id.in_(ids), *guard).with_for_update()


@functools.lru_cache(maxsize=512)
def _outcome_update(shape: Shape, size: int, returning: bool, per_row_error: bool) -> Executable:
    """The guarded UPDATE that records size outcomes moving their messages to shape.new.

    Values come as parameters: id0..idN and at0..atN (when each finished), error0..errorN
    or one error for all, due0..dueN for a deferral, recipients0..recipientsN if the
    shape writes them, and worker, whose claim guards it.
    """
    new = shape.new
    c = MESSAGES.c
    ids = [bindparam(f"id{n}", type_=c.id.type) for n in range(size)]

    def per_row(name: str, column: Any) -> Any:
        whens = [(c.id == ids[n], bindparam(f"{name}{n}", type_=column.type))
                 for n in range(size)]  # fmt: skip
        return case(*whens, else_=column)

    values: dict[str, object] = {
        "attempts": c.attempts + 1,
        "last_retry": per_row("at", c.last_retry),
        "locked_by": None,
        "locked_at": None,
        "last_error": (
            per_row("error", c.last_error)
            if per_row_error
            else bindparam("error", type_=c.last_error.type)
        ),
    }
    if shape.fault:  # counted, so the retry schedule backs off, and given back
        values["max_attempts"] = c.max_attempts + 1
    if shape.recipients:
        values["recipients"] = per_row("recipients", c.recipients)
    if new is Status.SENT:
        values["sent_at"] = per_row("at", c.sent_at)
    elif new is Status.DEFERRED:
        values["next_attempt_at"] = per_row("due", c.next_attempt_at)
    stmt = guarded(Status.SENDING, new, c.id.in_(ids), c.locked_by == bindparam("worker"),
                   **values)  # fmt: skip
    return stmt.returning(c.id) if returning else stmt


def _settles(done: Finished) -> tuple[Status, Outcome, str | None]:
    """The status an outcome moves its message to, the attempt's outcome and its error.

    A deferral that uses up the last attempt is recorded as the failure it is, unless
    it was the server's or the settings' fault: that spends no attempt.
    """
    if done.fault:
        return Status.DEFERRED, Outcome.DEFERRED, done.error
    if done.outcome is Outcome.DEFERRED:
        attempts = done.claim.attempts + 1
        if attempts < done.claim.max_attempts:
            return Status.DEFERRED, Outcome.DEFERRED, done.error
        return Status.FAILED, Outcome.FAILED, f"{done.error} (gave up after {attempts} attempts)"
    new = Status.SENT if done.outcome is Outcome.SENT else Status.FAILED
    return new, done.outcome, done.error


def release_stale(lock_timeout: float, now: datetime | None = None) -> int:
    """Take back messages whose claim is older than lock_timeout: their worker died.

    Each is recorded as a "worker lost" attempt and committed on its own; the guard on
    the claim keeps a live owner's outcome from being overwritten.
    """
    now = now or utcnow()
    c = MESSAGES.c
    stale = select(c.id, c.locked_by, c.locked_at, c.attempts, c.max_attempts, c.message_id).where(
        c.status == Status.SENDING.value, c.locked_at < now - timedelta(seconds=lock_timeout)
    )
    if db.engine.dialect.name != "sqlite":
        stale = stale.with_for_update(skip_locked=True)
    count = 0
    for row in db.session.execute(stale).all():
        error = f"worker lost: claim by {row.locked_by} expired after {lock_timeout:g}s"
        failed = row.attempts + 1 >= row.max_attempts
        new = Status.FAILED if failed else Status.DEFERRED
        due = {} if failed else {"next_attempt_at": now}
        stmt = guarded(Status.SENDING, new, c.id == row.id, c.locked_by == row.locked_by,
                       attempts=row.attempts + 1, last_retry=now, locked_by=None,
                       locked_at=None, last_error=error, **due)  # fmt: skip
        if changed(stmt) == 1:
            attempt = {"message_pk": row.id, "started_at": row.locked_at, "finished_at": now,
                       "worker_id": row.locked_by, "outcome": Outcome.WORKER_LOST.value,
                       "smtp_code": None, "error": error, "reply": None,
                       "route": None}  # fmt: skip
            db.session.execute(insert(ATTEMPTS), attempt)
            hooks.lost(row.id, row.message_id, new, error, now)
            count += 1
        db.session.commit()
    db.session.commit()
    return count
