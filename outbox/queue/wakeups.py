"""Wake-ups for idle workers: a message stored or moved due now is announced, not left for
the tick.

PostgreSQL: the transaction that inserts due rows, or that a staff move makes due
(wake: send now, resend, a mailing's resume), sends NOTIFY on CHANNEL, which the server
delivers when (and only if) it commits; each worker keeps a connection that LISTENs
(Listener). MariaDB/MySQL and SQLite have no such thing: an idle worker asks for the
newest message id and the count of staff moves in the one-row wakes table (Probe: one
step down the primary key and one row read by its key) every WAKE_INTERVAL and drains
when either grew; the same commits also ring the doorbells of this host's workers
(queue.doorbell), which wake them without waiting for their next probe. Either way a
wake-up only starts a pass sooner: the claims decide who sends what, and the worker's
tick still sweeps up anything a wake-up missed.
"""

import contextlib
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, cast

import psycopg
from flask import current_app
from sqlalchemy import Connection, Engine, Table, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError

from outbox.core.status import CLAIMABLE
from outbox.models import Wake, utcnow
from outbox.models.db import db
from outbox.queue import doorbell
from outbox.queue.moves import MESSAGES, changed

log = logging.getLogger("outbox.worker")

CHANNEL = "outbox_due"
NOTIFY = text(f"NOTIFY {CHANNEL}")
CLAIMABLE_VALUES = frozenset(s.value for s in CLAIMABLE)
# Seconds between tries to listen again after the connection was lost, at most.
RELISTEN_MAX = 10.0


def announcing(engine: Engine) -> bool:
    """Whether inserts on engine's database send NOTIFY (PostgreSQL, wake-ups on)."""
    return engine.dialect.name == "postgresql" and bool(current_app.config["WAKE_UPS"])


def ringing(engine: Engine) -> bool:
    """Whether commits on engine's database ring this host's doorbells (no NOTIFY there)."""
    return engine.dialect.name != "postgresql" and bool(current_app.config["WAKE_UPS"])


def any_due(rows: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a worker could claim any of these new rows now."""
    now = utcnow()
    return any(
        row.get("status") in CLAIMABLE_VALUES and row.get("next_attempt_at", now) <= now
        for row in rows
    )


def announce(rows: Iterable[Mapping[str, Any]]) -> None:
    """If any of the rows is due now: NOTIFY in the session's transaction (PostgreSQL), or
    the doorbells rung once it commits (elsewhere).

    One per transaction is enough, and the server folds repeats of it: called per INSERT.
    """
    if announcing(db.engine) and any_due(rows):
        db.session.connection().execute(NOTIFY)
    elif ringing(db.engine) and any_due(rows):
        doorbell.due_on_commit()


WAKES = cast(Table, Wake.__table__)
# The one row of wakes; a database emptied of it (a test's) gets it again at the next move.
WAKE_ROW = 1


def wake() -> None:
    """Tell idle workers, in the session's transaction, that a staff move made messages due.

    PostgreSQL: NOTIFY. Elsewhere: the count in wakes goes up by one, which the probe
    sees, and this host's doorbells ring once the transaction commits. Called last before
    the commit: the row's lock is then held only for the commit, and always after the
    messages' (no deadlock between two moves).
    """
    if not current_app.config["WAKE_UPS"]:
        return
    if db.engine.dialect.name == "postgresql":
        db.session.connection().execute(NOTIFY)
        return
    bump = update(WAKES).where(WAKES.c.id == WAKE_ROW).values(moves=WAKES.c.moves + 1)
    if not changed(bump):
        db.session.execute(insert(WAKES).values(id=WAKE_ROW, moves=1))
    doorbell.due_on_commit()


class Mark(NamedTuple):
    """What an idle worker that probes watches: a new message, or a new staff move."""

    newest_id: int
    moves: int

    def grew(self, seen: "Mark") -> bool:
        return self.newest_id > seen.newest_id or self.moves > seen.moves


NEWEST = select(func.max(MESSAGES.c.id))
MARK = select(
    NEWEST.scalar_subquery(),
    select(WAKES.c.moves).where(WAKES.c.id == WAKE_ROW).scalar_subquery(),
)


def newest_id() -> int:
    """The highest message id stored (0 for none), in the session's transaction."""
    found = db.session.execute(NEWEST).scalar()
    db.session.commit()
    return int(found or 0)


class Probe:
    """An idle worker's question, the Mark, on a connection of its own that commits each
    statement: one statement a probe (no COMMIT, no pool's ROLLBACK), no app context."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.conn: Connection | None = None

    def newest(self) -> Mark | None:
        """The newest message id and the staff moves so far; None while the database is away."""
        try:
            if self.conn is None:
                self.conn = self.engine.connect()
            found = self.conn.execute(MARK).one()
            return Mark(int(found[0] or 0), int(found[1] or 0))
        except DBAPIError:
            self.close()
            return None

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(DBAPIError):
                self.conn.close()
            self.conn = None


class Listener:
    """A connection of its own that LISTENs on CHANNEL and sets woken on each NOTIFY.

    After the connection is lost it connects again (waiting up to RELISTEN_MAX between
    tries) and sets woken once listening again: whatever was stored meanwhile was not
    announced to it.
    """

    def __init__(self, engine: Engine, woken: threading.Event, stop: threading.Event) -> None:
        self.woken, self.stop = woken, stop
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        self.connect_args: tuple[list[Any], dict[str, Any]] = (list(args), dict(kwargs))
        self.listening = threading.Event()  # set while LISTEN is in place

    def run(self) -> None:
        """Listen until stop is set."""
        wait = 0.5
        while not self.stop.is_set():
            try:
                self._listen()
                wait = 0.5
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("wake-ups: listening on %s failed, again in %gs: %s",
                            CHANNEL, wait, exc)  # fmt: skip
                self.stop.wait(wait)
                wait = min(wait * 2, RELISTEN_MAX)

    def _listen(self) -> None:
        args, kwargs = self.connect_args
        # Keepalives: a peer that vanished without a word is noticed within a minute.
        kwargs = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                  "keepalives_count": 3, **kwargs}  # fmt: skip
        with psycopg.connect(*args, **kwargs, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            self.woken.set()
            while not self.stop.is_set():
                for _ in conn.notifies(timeout=1.0, stop_after=1):
                    self.woken.set()
