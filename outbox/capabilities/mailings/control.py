"""A mailing as a whole: pause, resume and cancel it, and count its progress.

Each first writes the mailing's state (a move of status.MAILING_MOVES, guarded by the
state it expects) and commits it, then has the queue move its waiting rows, a chunk per
transaction (queue.waiting). An append (intake.append) holds the mailing's row lock until
it commits, so the rows it adds are either moved here too or added in the new state.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import cast

from sqlalchemy import Integer, Table, Text, Update, case, func, select, update
from sqlalchemy import cast as sql_cast

from outbox import queue
from outbox.capabilities.mailings.intake import Refusal
from outbox.core.status import MAILING_MOVES, MailingState
from outbox.models import Mailing
from outbox.models.db import db
from outbox.queue.moves import MESSAGES, changed

MAILINGS = cast(Table, Mailing.__table__)
OPEN, PAUSED, CANCELLED = MailingState.OPEN, MailingState.PAUSED, MailingState.CANCELLED
# What the progress counts: each status, and bounced among the sent.
COUNTED = ("queued", "sending", "sent", "deferred", "failed", "bounced", "cancelled")


def guarded(old: Iterable[MailingState], new: MailingState, mailing_id: int) -> Update:
    """The UPDATE that moves a mailing in one of the old states to new.

    As queue.moves.guarded for a message: each move is checked against
    status.MAILING_MOVES when the statement is made, and the WHERE names the states the
    row must be in.
    """
    olds = tuple(old)
    refused = [(o.value, new.value) for o in olds if new not in MAILING_MOVES[o]]
    if not olds or refused:
        raise ValueError(f"moves not in status.MAILING_MOVES: {refused or 'none named'}")
    c = MAILINGS.c
    expected = c.state.in_([o.value for o in olds])
    return update(MAILINGS).where(c.id == mailing_id, expected).values(state=new.value)


def _set_state(mailing_id: int, allowed: tuple[MailingState, ...], state: MailingState) -> None:
    """Write the mailing's new state and commit; Refusal if it is not in an allowed one."""
    if changed(guarded(allowed, state, mailing_id)) == 1:
        db.session.commit()
        return
    found = db.session.scalar(select(MAILINGS.c.state).where(MAILINGS.c.id == mailing_id))
    db.session.rollback()
    if found is None:
        raise Refusal(404, f"no mailing {mailing_id}")
    named = " or ".join(a.value for a in allowed)
    raise Refusal(409, f"the mailing is {found}, not {named}", state=found)


def pause(mailing_id: int) -> int:
    """Keep the mailing's waiting rows from being claimed; rows already claimed finish."""
    _set_state(mailing_id, (OPEN, PAUSED), PAUSED)
    return queue.pause_mailing(mailing_id)


def resume(mailing_id: int, now: datetime | None = None) -> int:
    """Make the paused rows due again: now, or at the send_after still ahead.

    A deferred row's retry time is not kept: it is tried at once.
    """
    _set_state(mailing_id, (PAUSED, OPEN), OPEN)
    return queue.resume_mailing(mailing_id, now)


def cancel(mailing_id: int) -> int:
    """Cancel every waiting row of the mailing; rows already claimed finish. How many."""
    _set_state(mailing_id, (OPEN, PAUSED, CANCELLED), CANCELLED)
    return queue.cancel_mailing(mailing_id)


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
    return queue.paused_rows(mailing_id)
