"""Moving a mailing's waiting messages as a whole: held back by its pause, due again at its
resume, cancelled with it.

Each verb moves the rows a chunk at a time, each chunk a guarded UPDATE (moves.guarded) of
its own short transaction: no transaction holds 100,000 row locks, and a worker's claim
waits at most for one chunk. Rows already claimed finish as they would.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, func, select

from outbox.core.status import CLAIMABLE, Status
from outbox.models import utcnow
from outbox.models.db import db
from outbox.queue import wakeups
from outbox.queue.moves import MESSAGES, changed, due_again, guarded

# A paused mailing's waiting rows are due at this time, out of every claim's reach, and due
# again when it resumes. A row added to a paused mailing is stored due then.
PAUSED_UNTIL = datetime(9999, 1, 1)
CHUNK = 2_000  # rows a transaction moves


def _in_chunks(mailing_id: int, where: Any, move: Callable[[list[int]], int]) -> int:
    """Apply move to the ids of the mailing's rows matching where, a chunk per commit."""
    c, last, total = MESSAGES.c, 0, 0
    while True:
        chosen = select(c.id).where(c.mailing_id == mailing_id, c.id > last, where)
        ids = list(db.session.scalars(chosen.order_by(c.id).limit(CHUNK)))
        if not ids:
            db.session.commit()
            return total
        total += move(ids)
        db.session.commit()
        last = ids[-1]


def _waiting(*more: Any) -> ColumnElement[bool]:
    """The rows a worker may still claim, and any further condition."""
    return and_(MESSAGES.c.status.in_([s.value for s in CLAIMABLE]), *more)


def pause_mailing(mailing_id: int) -> int:
    """Keep the mailing's waiting rows from being claimed; how many were held back."""
    c = MESSAGES.c
    held = c.next_attempt_at != PAUSED_UNTIL

    def move(ids: list[int]) -> int:
        return changed(guarded(CLAIMABLE, None, c.id.in_(ids), next_attempt_at=PAUSED_UNTIL))

    return _in_chunks(mailing_id, _waiting(held), move)


def resume_mailing(mailing_id: int, now: datetime | None = None) -> int:
    """Make the mailing's paused rows due again: now, or at the send_after still ahead;
    idle workers are woken.

    A deferred row's retry time is not kept: it is tried at once.
    """
    c, due = MESSAGES.c, due_again(now or utcnow())

    def move(ids: list[int]) -> int:
        paused = c.next_attempt_at == PAUSED_UNTIL
        moved = changed(guarded(CLAIMABLE, None, c.id.in_(ids), paused, next_attempt_at=due))
        if moved:
            wakeups.wake()  # each chunk as it commits: workers start on the first
        return moved

    return _in_chunks(mailing_id, _waiting(c.next_attempt_at == PAUSED_UNTIL), move)


def cancel_mailing(mailing_id: int) -> int:
    """Cancel every waiting row of the mailing; how many."""

    def move(ids: list[int]) -> int:
        return changed(guarded(CLAIMABLE, Status.CANCELLED, MESSAGES.c.id.in_(ids)))

    return _in_chunks(mailing_id, _waiting(), move)


def paused_rows(mailing_id: int) -> int:
    """How many of the mailing's waiting rows are held by its pause."""
    c = MESSAGES.c
    stmt = select(func.count()).where(
        c.mailing_id == mailing_id, _waiting(c.next_attempt_at == PAUSED_UNTIL)
    )
    return int(db.session.scalar(stmt) or 0)
