"""A mailing as a whole: pause, resume and cancel its waiting rows, and count its progress.

Each first writes the mailing's state and commits it, then moves its rows a chunk at a
time, each chunk a guarded UPDATE (queue.moves.guarded) of its own short transaction: no
transaction holds 100,000 row locks, and a worker's claim waits at most for one chunk.
An append (intake.append) holds the mailing's row lock until it commits, so the rows it
adds are either moved here too or added in the new state.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Integer, Table, Text, and_, case, func, select
from sqlalchemy import cast as sql_cast

from outbox.capabilities.mailings.intake import CANCELLED, OPEN, PAUSED, Refusal
from outbox.capabilities.mailings.recipients import PAUSED_UNTIL
from outbox.core.status import CLAIMABLE, Status
from outbox.models import Mailing, Message, utcnow
from outbox.models.db import db
from outbox.queue.moves import MESSAGES, changed, due_again, guarded

MAILINGS = cast(Table, Mailing.__table__)
CHUNK = 2_000  # rows a transaction moves
# What the progress counts: each status, and bounced among the sent.
COUNTED = ("queued", "sending", "sent", "deferred", "failed", "bounced", "cancelled")


def _set_state(mailing_id: int, allowed: tuple[str, ...], state: str) -> None:
    """Write the mailing's new state and commit; Refusal if it is not in an allowed one."""
    mailing = db.session.get(Mailing, mailing_id, with_for_update=True)
    if mailing is None:
        db.session.rollback()
        raise Refusal(404, f"no mailing {mailing_id}")
    if mailing.state not in allowed:
        found = mailing.state
        db.session.rollback()
        raise Refusal(409, f"the mailing is {found}, not {' or '.join(allowed)}", state=found)
    mailing.state = state
    db.session.commit()


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


def _waiting(*more: Any) -> Any:
    """The mailing's rows a worker may still claim, and any further condition."""
    return and_(MESSAGES.c.status.in_([s.value for s in CLAIMABLE]), *more)


def pause(mailing_id: int) -> int:
    """Keep the mailing's waiting rows from being claimed; rows already claimed finish."""
    _set_state(mailing_id, (OPEN, PAUSED), PAUSED)
    c = MESSAGES.c
    held = c.next_attempt_at != PAUSED_UNTIL

    def move(ids: list[int]) -> int:
        return changed(guarded(CLAIMABLE, None, c.id.in_(ids), next_attempt_at=PAUSED_UNTIL))

    return _in_chunks(mailing_id, _waiting(held), move)


def resume(mailing_id: int, now: datetime | None = None) -> int:
    """Make the paused rows due again: now, or at the send_after still ahead.

    A deferred row's retry time is not kept: it is tried at once.
    """
    _set_state(mailing_id, (PAUSED, OPEN), OPEN)
    c, due = MESSAGES.c, due_again(now or utcnow())

    def move(ids: list[int]) -> int:
        paused = c.next_attempt_at == PAUSED_UNTIL
        return changed(guarded(CLAIMABLE, None, c.id.in_(ids), paused, next_attempt_at=due))

    return _in_chunks(mailing_id, _waiting(c.next_attempt_at == PAUSED_UNTIL), move)


def cancel(mailing_id: int) -> int:
    """Cancel every waiting row of the mailing; rows already claimed finish. How many."""
    _set_state(mailing_id, (OPEN, PAUSED, CANCELLED), CANCELLED)

    def move(ids: list[int]) -> int:
        return changed(guarded(CLAIMABLE, Status.CANCELLED, MESSAGES.c.id.in_(ids)))

    return _in_chunks(mailing_id, _waiting(), move)


def progress(mailing_ids: list[int]) -> dict[int, dict[str, int]]:
    """Each mailing's rows per status and bounced among them, in one GROUP BY."""
    c = MESSAGES.c
    bounced = case((sql_cast(c.recipients, Text).like('%"bounced"%'), 1), else_=0)
    stmt = (
        select(c.mailing_id, c.status, func.count(), func.sum(sql_cast(bounced, Integer)))
        .where(c.mailing_id.in_(mailing_ids))
        .group_by(c.mailing_id, c.status)
    )
    found = {pk: dict.fromkeys(COUNTED, 0) for pk in mailing_ids}
    for pk, status, count, bounces in db.session.execute(stmt):
        found[pk][status] = found[pk].get(status, 0) + count
        found[pk]["bounced"] += int(bounces or 0)
    db.session.commit()
    return found


def paused_rows(mailing_id: int) -> int:
    """How many of the mailing's waiting rows are held by its pause."""
    stmt = select(func.count()).where(
        Message.mailing_id == mailing_id, _waiting(MESSAGES.c.next_attempt_at == PAUSED_UNTIL)
    )
    return int(db.session.scalar(stmt) or 0)
