"""The SQL the app's engines run while a test looks: how many statements a step costs."""

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from outbox.models.db import db


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL each engine of the app runs meanwhile."""
    seen: list[str] = []

    def executed(conn, cursor, statement, *args):  # type: ignore[no-untyped-def]
        seen.append(statement)

    engines = list(db.engines.values())
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", executed)
    try:
        yield seen
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", executed)
