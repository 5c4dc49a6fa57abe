"""Every INSERT of a message row: one in the session's transaction, one that commits itself
straight through the driver (the API's hot path, queue.direct), or many at once.

Inserts of rows due now also wake the workers (queue.wakeups): NOTIFY on PostgreSQL, this
host's doorbells elsewhere (queue.doorbell).
The callers build the rows (store.message_row, a mailing's recipients, a submitted mail)
and screen them first (queue.hooks); these only insert them, in the caller's transaction
but for insert_alone, and leave the commit to it.
"""

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import insert, select

from outbox.models.db import AUTOCOMMIT, db
from outbox.queue import direct, doorbell, wakeups
from outbox.queue.moves import MESSAGES

# Core INSERTs: not the ORM's unit of work (a third less CPU per message), nor
# Session.execute's ORM layer (a tenth less again).
INSERT_MESSAGE = insert(MESSAGES)


def insert_row(row: dict[str, Any]) -> int:
    """Insert one row in the session's transaction; its new id."""
    key = db.session.connection().execute(INSERT_MESSAGE, row).inserted_primary_key
    assert key is not None  # a single-row INSERT always has one
    wakeups.announce([row])
    return int(key[0])


def insert_alone(row: dict[str, Any]) -> int:
    """Insert one row in an INSERT that commits itself: one round trip, no COMMIT after it;
    its new id. Only where an autocommit engine is bound (AUTOCOMMIT in db.engines)."""
    engine = db.engines[AUTOCOMMIT]
    wake = wakeups.CHANNEL if wakeups.announcing(engine) and wakeups.any_due([row]) else None
    pk = direct.insert_row(engine, MESSAGES, row, notify=wake)
    if wakeups.ringing(engine) and wakeups.any_due([row]):
        doorbell.ring()
    return pk


def insert_rows(rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows in one statement in the session's transaction, their ids not read."""
    db.session.execute(INSERT_MESSAGE, rows)
    wakeups.announce(rows)


def insert_groups(rows: Sequence[dict[str, Any]], groups: Iterable[range]) -> list[int]:
    """Insert the rows, a group of indices per statement; their new ids in the rows' order."""
    ids: dict[str, int] = {}
    table = MESSAGES
    returning = db.engine.dialect.insert_executemany_returning
    for group in groups:
        part = [rows[i] for i in group]
        if returning:  # insertmanyvalues: multi-row INSERT ... RETURNING
            found = db.session.execute(
                INSERT_MESSAGE.returning(table.c.id, table.c.message_id), part
            )
        else:  # MySQL has no RETURNING: find the rows by their unique Message-IDs
            db.session.execute(INSERT_MESSAGE, part)
            wanted = [row["message_id"] for row in part]
            found = db.session.execute(
                select(table.c.id, table.c.message_id).where(table.c.message_id.in_(wanted))
            )
        ids.update({message_id: pk for pk, message_id in found})
    wakeups.announce(rows)
    return [ids[str(row["message_id"])] for row in rows]
