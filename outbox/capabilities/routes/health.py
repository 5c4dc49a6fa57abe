"""Writing each route's health (table route_health) as the workers see it, and reading it back.

A worker notes every batch's end for its route; a process writes a route's row at most
once every WRITE_EVERY seconds, and at once when the route goes from up to failing or
back, so a relay that goes down shows on the pages within one batch, and a busy worker
costs the database one small UPDATE a second per route, not one per batch.
"""

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from outbox.models import RouteHealth
from outbox.models.db import db

log = logging.getLogger("outbox.routes")
WRITE_EVERY = 1.0  # seconds between two writes of one route's row by one process
FAULT_CHARS = 1000  # a fault's text is cut to this many characters
TABLE = cast(Table, RouteHealth.__table__)


@dataclass
class _Seen:
    """What one process noted for a route since it last wrote the route's row."""

    ok: bool  # the latest note
    written: float = float("-inf")  # time.monotonic() of the last write
    ok_at: datetime | None = None
    fault_at: datetime | None = None
    fault: str | None = None
    faults: int = 0  # faults after the last success noted (or all, if none was)
    since: datetime | None = None  # the first of them
    reset: bool = False  # a success was noted: the faults before it no longer count


_seen: dict[str, _Seen] = {}
_lock = threading.Lock()


def note(name: str, ok: bool, error: str | None, now: datetime) -> bool:
    """Note that a send through route name went well (ok) or met a transport fault (error).

    Writes the route's row when this process last wrote it WRITE_EVERY seconds ago or
    more, or when the route's state changes; returns whether it wrote. Safe from threads;
    the write is a transaction of its own, on a connection of its own. Health is advisory:
    a write the database refuses is logged, never raised, and the next note writes again.
    """
    with _lock:
        seen = _seen.get(name)
        changed = seen is None or seen.ok != ok
        if seen is None:
            seen = _seen[name] = _Seen(ok)
        seen.ok = ok
        if ok:
            seen.ok_at, seen.faults, seen.since, seen.reset = now, 0, None, True
        else:
            seen.fault_at, seen.fault = now, (error or "failed")[:FAULT_CHARS]
            seen.faults += 1
            seen.since = seen.since or now
        if not changed and time.monotonic() - seen.written < WRITE_EVERY:
            return False
        values, first = _values(seen, now)
        seen.written = time.monotonic()
        seen.ok_at = seen.fault_at = seen.fault = seen.since = None
        seen.faults, seen.reset = 0, False
    try:
        _write(name, values, first)
    except SQLAlchemyError as exc:
        log.warning("route %s: its health could not be written: %s", name, exc)
        with _lock:
            seen.written = float("-inf")
        return False
    return True


def _values(seen: _Seen, now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """The columns to set on the route's row, and those of a first row if it has none.

    The latest note wins; faults after a success noted here restart the count.
    """
    c = TABLE.c
    first: dict[str, Any] = {"noted_at": now, "ok_at": seen.ok_at, "fault_at": seen.fault_at,
                             "fault": seen.fault, "faults": seen.faults,
                             "failing_since": None if seen.ok else seen.since}  # fmt: skip
    values = {key: value for key, value in first.items() if value is not None}
    if seen.ok or seen.reset:
        values.update(faults=first["faults"], failing_since=first["failing_since"])
    else:  # failing_since is NULL exactly when faults is 0: the first fault of a run sets it
        values.update(faults=c.faults + seen.faults,
                      failing_since=func.coalesce(c.failing_since, seen.since))  # fmt: skip
    return values, first


def _write(name: str, values: dict[str, Any], first: dict[str, Any]) -> None:
    """UPDATE the route's row, or INSERT it the first time (another process may race us)."""
    stmt = update(TABLE).where(TABLE.c.name == name).values(values)
    with db.engine.begin() as conn:
        if conn.execute(stmt).rowcount:
            return
    try:
        with db.engine.begin() as conn:
            conn.execute(insert(TABLE).values(name=name, **first))
    except IntegrityError:  # inserted by another process since our UPDATE: update it
        with db.engine.begin() as conn:
            conn.execute(stmt)


def forget() -> None:
    """Drop what this process noted and has not written (tests; a new worker process)."""
    with _lock:
        _seen.clear()


def read(names: Iterable[str]) -> dict[str, RouteHealth]:
    """The health rows of the routes named, by name (a route never noted has none)."""
    wanted = list(names)
    rows = db.session.scalars(select(RouteHealth).where(RouteHealth.name.in_(wanted)))
    return {row.name: row for row in rows}
