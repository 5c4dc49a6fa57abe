"""How a message's status is written: the one guarded UPDATE that every move of the queue uses."""

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Executable,
    Table,
    Update,
    bindparam,
    case,
    null,
    update,
)

from outbox.core.status import MOVES, Status
from outbox.models import Attempt, Message, Timestamp, utcnow
from outbox.models.db import db

SETTLED = frozenset({Status.SENT, Status.FAILED, Status.CANCELLED})

# Statements on the tables, not the mapped classes: the session then runs them as
# plain SQL and reuses their cache keys, instead of preparing each again for the ORM.
MESSAGES = cast(Table, Message.__table__)
ATTEMPTS = cast(Table, Attempt.__table__)


class MoveRefused(Exception):
    """The message is not in a status from which that move is allowed."""


def guarded(
    old: Status | Iterable[Status],
    new: Status | Iterable[Status] | None,
    *where: ColumnElement[bool],
    status: Any = None,
    **values: Any,
) -> Update:
    """The UPDATE of messages in one of the old statuses that moves them to new.

    Every status the queue writes is written by a statement made here, single rows and
    batches alike: the WHERE names the statuses the rows must be in (the caller adds its
    own guards, such as the claim), and each move is checked against status.MOVES when
    the statement is made, so a move the table does not allow is never sent. `new` is
    one status; several, with `status` the SQL expression that chooses among them per
    row; or None for a write that leaves the status as it is (a renewal, a new due time).
    Callers check the row count the statement returns (changed()).
    """
    olds = (old,) if isinstance(old, Status) else tuple(old)
    if not olds:
        raise ValueError("a guarded UPDATE names the statuses it expects")
    if "status" in values:
        raise ValueError("the status is given as new, not as a value")
    if new is None:
        if status is not None:
            raise ValueError("a write that keeps the status cannot choose one")
    else:
        news = (new,) if isinstance(new, Status) else tuple(new)
        refused = [(o.value, n.value) for o in olds for n in news if n not in MOVES[o]]
        if refused:
            raise ValueError(f"moves not in status.MOVES: {refused}")
        if (status is None) != (len(news) == 1):
            raise ValueError("an expression that chooses goes with several new statuses")
        if status is None:
            status = news[0].value
        values["status"] = status
        values.setdefault("settled_at", _settled_at(news, status))
    if new is not None and Status.QUEUED in news and any(o in SETTLED for o in olds):
        # retention: a message whose bodies were dropped is never sent again.
        where = (*where, MESSAGES.c.bodies_dropped_at.is_(None))
    column = MESSAGES.c.status
    expected = column == olds[0].value if len(olds) == 1 else column.in_([o.value for o in olds])
    return update(MESSAGES).where(expected, *where).values(**values)


def _settled_at(news: tuple[Status, ...], status: Any) -> Any:
    """When a message settled, for outbox.retention: now for a settled status, else NULL.

    The time is a parameter read when the statement runs, so a cached statement is
    never stuck with the time it was made.
    """
    if not any(n in SETTLED for n in news):
        return null()
    now = bindparam("settled_now", callable_=utcnow, type_=Timestamp)
    if all(n in SETTLED for n in news):
        return now
    return case((status.in_([n.value for n in SETTLED]), now), else_=null())


def changed(stmt: Executable, params: dict[str, Any] | None = None) -> int:
    """Run an UPDATE in the session's transaction and return how many rows it changed."""
    result = db.session.execute(stmt, params)
    return cast(CursorResult[Any], result).rowcount


def move_one(message_id: int, old: Iterable[Status], new: Status, **values: Any) -> bool:
    """Move one message from one of the old statuses to new; commit; True if it moved."""
    moved = changed(guarded(old, new, MESSAGES.c.id == message_id, **values)) == 1
    db.session.commit()
    return moved


def due_again(now: datetime) -> ColumnElement[Any]:
    """When a message queued again (resend) is due: now, or its send_after if still ahead.

    A cancelled message may never have reached its send_after; queuing it again must not
    send it early.
    """
    return case((MESSAGES.c.send_after > now, MESSAGES.c.send_after), else_=now)


# --- retention: the two writes of outbox.retention, beside every other UPDATE ---
def drop_bodies(ids: list[int], now: datetime) -> int:
    """Empty the bodies of these settled messages and mark when; their status stays."""
    settled = MESSAGES.c.status.in_([s.value for s in SETTLED])
    stmt = update(MESSAGES).where(MESSAGES.c.id.in_(ids), settled)
    return changed(stmt.values(text_body=None, html_body=None, bodies_dropped_at=now))


def forget_originals(ids: list[int]) -> None:
    """Unlink the copies of these messages before they go (ON DELETE SET NULL by hand)."""
    changed(update(MESSAGES).where(MESSAGES.c.resent_from.in_(ids)).values(resent_from=None))
