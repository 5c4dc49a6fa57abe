"""One INSERT straight through the database driver: the API's single message, on the hot path.

The statement is compiled by SQLAlchemy once per engine and set of columns, and each
value goes through the column type's own bind processing (the JSON column's encoder);
only Connection.execute's per-call machinery is skipped, about a third of the INSERT's
CPU (bench/README's enqueue section). Errors come out as SQLAlchemy raises them
(OperationalError, IntegrityError, ...), connecting included (Engine.raw_connection
raises the driver's own), and a connection the server dropped is invalidated, as
Connection.execute does. SQLAlchemy's cursor events do not see it.
tests/db/test_direct.py holds the rows it writes to those of a Core INSERT.
"""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Dialect, Engine, Table, exc, insert


@dataclass(frozen=True)
class Compiled:
    """An INSERT as the driver takes it, and what to do with the values first."""

    sql: str
    positions: tuple[str, ...]  # the parameters' order, for a positional paramstyle
    processors: tuple[tuple[str, Callable[[Any], Any]], ...]  # bind processing, by column
    returning: bool  # the id comes back as a row (PostgreSQL), else as lastrowid (MySQL)


@functools.lru_cache(maxsize=32)
def compiled(
    table: Table, dialect: Dialect, columns: tuple[str, ...], notify: str | None = None
) -> Compiled:
    """The INSERT of these columns, as SQLAlchemy would send it to this dialect's driver.

    notify (PostgreSQL): the statement also sends pg_notify on that channel, in the same
    round trip and the same transaction, so that it is heard only once the row is there.
    """
    # As SQLAlchemy fetches a new primary key: the driver's lastrowid where the dialect
    # reads it (MySQL, MariaDB), else RETURNING.
    returning = not getattr(dialect, "postfetch_lastrowid", False) and dialect.insert_returning
    stmt = insert(table).returning(table.c.id) if returning else insert(table)
    done = stmt.compile(dialect=dialect, column_keys=list(columns))
    processors = []
    for name in columns:
        process = table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors.append((name, process))
    positions = tuple(done.positiontup or ()) if done.positional else ()
    sql = str(done)
    if notify is not None:
        if not returning:
            raise ValueError(f"{dialect.name} has no NOTIFY")
        sql = f"WITH new AS ({sql}) SELECT id, pg_notify('{notify}', '') FROM new"
    return Compiled(sql, positions, tuple(processors), returning)


def insert_row(
    engine: Engine, table: Table, row: Mapping[str, Any], notify: str | None = None
) -> int:
    """INSERT one row on a connection of engine's pool; its new primary key.

    On an autocommit engine the row is committed when this returns. notify: as compiled's.
    """
    statement = compiled(table, engine.dialect, tuple(row), notify)
    values = dict(row)
    for name, process in statement.processors:
        values[name] = process(values[name])
    params: Any = tuple(values[n] for n in statement.positions) if statement.positions else values
    dialect, dbapi = engine.dialect, engine.dialect.loaded_dbapi
    try:
        connection = engine.raw_connection()
    except dbapi.Error as error:  # what Connection() raises when it cannot connect
        lost = dialect.is_disconnect(error, None, None)
        raise exc.DBAPIError.instance(
            None, None, error, dbapi.Error, connection_invalidated=lost, dialect=dialect
        ) from error
    cursor = None
    try:
        cursor = connection.cursor()
        cursor.execute(statement.sql, params)
        pk = cursor.fetchone()[0] if statement.returning else cursor.lastrowid  # type: ignore[index]
        cursor.close()
    except dbapi.Error as error:
        lost = dialect.is_disconnect(error, connection.dbapi_connection, cursor)
        if lost:
            connection.invalidate(error)
        raise exc.DBAPIError.instance(
            statement.sql, params, error, dbapi.Error, connection_invalidated=lost, dialect=dialect
        ) from error
    finally:
        connection.close()
    return int(pk)
