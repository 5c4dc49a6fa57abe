"""How a message's status is written: the one guarded UPDATE that every move of the queue uses."""

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, Executable, Table, Update, update

from ..extensions import db
from ..models import Attempt, Message
from ..status import MOVES, Status

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
    column = MESSAGES.c.status
    expected = column == olds[0].value if len(olds) == 1 else column.in_([o.value for o in olds])
    return update(MESSAGES).where(expected, *where).values(**values)


def changed(stmt: Executable, params: dict[str, Any] | None = None) -> int:
    """Run an UPDATE in the session's transaction and return how many rows it changed."""
    result = db.session.execute(stmt, params)
    return cast(CursorResult[Any], result).rowcount


def move_one(message_id: int, old: Iterable[Status], new: Status, **values: Any) -> bool:
    """Move one message from one of the old statuses to new; commit; True if it moved."""
    moved = changed(guarded(old, new, MESSAGES.c.id == message_id, **values)) == 1
    db.session.commit()
    return moved
