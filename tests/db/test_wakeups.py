"""queue.wakeups: what a store or a staff move tells the listening workers (PostgreSQL), and
what the probe sees of them elsewhere."""

import io
import json
from collections.abc import Callable, Iterator
from datetime import timedelta

import psycopg
import pytest

from outbox import queue
from outbox.capabilities.mailings import control, intake
from outbox.core.status import Status
from outbox.models import utcnow
from outbox.models.db import db
from outbox.ops import pause
from outbox.queue import inserts, store, wakeups
from tests.support.app import draft as make_draft
from tests.support.mailing_helpers import body
from tests.support.rows import store as write_row


class Heard:
    """A connection listening on the wake-up channel, read up to a marker of its own.

    Notifications come in the order their transactions committed: all that a commit
    before the marker's sent are in when the marker is.
    """

    def __init__(self, conn: psycopg.Connection, sender: psycopg.Connection) -> None:
        self.conn, self.sender, self.marks = conn, sender, 0

    def since_last(self) -> list[str]:
        """The payloads of the wake-ups committed since the last call."""
        self.marks += 1
        mark = f"mark {self.marks}"
        self.sender.execute("SELECT pg_notify(%s, %s)", (wakeups.CHANNEL, mark))
        found = []
        for note in self.conn.notifies(timeout=60):
            if note.payload == mark:
                return found
            found.append(note.payload)
        raise AssertionError("the marker never came")


@pytest.fixture
def heard(app) -> Iterator[Heard]:  # type: ignore[no-untyped-def]
    args, kwargs = db.engine.dialect.create_connect_args(db.engine.url)
    with (
        psycopg.connect(*args, **kwargs, autocommit=True) as conn,
        psycopg.connect(*args, **kwargs, autocommit=True) as sender,
    ):
        conn.execute(f"LISTEN {wakeups.CHANNEL}")
        yield Heard(conn, sender)


def draft(n: int, **fields: object):  # type: ignore[no-untyped-def]
    return make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text=f"{n}",
                      **fields)  # fmt: skip


on_postgres = pytest.mark.parametrize(
    "db_kind", [pytest.param("postgres", marks=pytest.mark.postgres)]
)


@on_postgres
def test_a_message_stored_alone_wakes_the_workers_once_it_is_there(app, heard):
    message, _ = queue.enqueue(draft(1), source="test", max_attempts=3)  # the direct INSERT
    assert heard.since_last() == [""]
    assert message.id == wakeups.newest_id()


@on_postgres
def test_a_wake_up_in_a_transaction_is_heard_on_commit_and_not_before(app, heard):
    row = store.message_row(draft(1), utcnow(), source="test", max_attempts=3)
    inserts.insert_row(row)
    assert heard.since_last() == []
    db.session.commit()
    assert heard.since_last() == [""]


@on_postgres
def test_a_rolled_back_store_wakes_no_one(app, heard):
    row = store.message_row(draft(1), utcnow(), source="test", max_attempts=3)
    inserts.insert_row(row)
    db.session.rollback()
    assert heard.since_last() == []


@on_postgres
def test_a_batch_wakes_the_workers_once(app, heard):
    queue.enqueue_batch([draft(n) for n in range(30)], source="test", max_attempts=3)
    assert heard.since_last() == [""]


@on_postgres
def test_mail_scheduled_for_later_wakes_no_one(app, heard):
    later = utcnow() + timedelta(hours=1)
    queue.enqueue(draft(1, send_after=later), source="test", max_attempts=3)
    queue.enqueue_batch([draft(n, send_after=later) for n in range(3)], source="test",
                        max_attempts=3)  # fmt: skip
    assert heard.since_last() == []


@on_postgres
def test_with_wake_ups_off_a_store_sends_no_notify(app, heard):
    app.config["WAKE_UPS"] = False
    queue.enqueue(draft(1), source="test", max_attempts=3)
    queue.enqueue_batch([draft(n) for n in range(3)], source="test", max_attempts=3)
    assert heard.since_last() == []


@pytest.mark.all_databases
def test_the_probe_finds_the_newest_message_id(app):
    assert wakeups.newest_id() == 0
    ids = [queue.enqueue(draft(n), source="test", max_attempts=3)[0].id for n in range(3)]
    assert wakeups.newest_id() == max(ids)


LATER = timedelta(days=1)


def waiting_in(status: Status) -> int:
    """A message in status, not due for a day, put there behind the queue's back (no wake-up)."""
    message, _ = queue.enqueue(draft(1, send_after=utcnow() + LATER), source="test",
                               max_attempts=3)  # fmt: skip
    write_row(message.id, Status.QUEUED, status=status.value, send_after=None,
              next_attempt_at=utcnow() + LATER)  # fmt: skip
    return message.id


def paused_mailing() -> int:
    """A mailing of two, paused."""
    payload = io.BytesIO(json.dumps(body()).encode())
    mailing, _ = intake.create(payload, source="test", max_attempts=3, default_sender=None)
    control.pause(mailing.id)
    return mailing.id


def sending_paused() -> None:
    pause.pause("staff@example.com")


# Each staff move that makes waiting messages due: what it starts from, and the move.
MOVES: dict[str, tuple[Callable[[], int | None], Callable[[int | None], object]]] = {
    "send now": (lambda: waiting_in(Status.DEFERRED), lambda m: queue.send_now(m)),
    "resend": (lambda: waiting_in(Status.FAILED), lambda m: queue.resend(m, 3)),
    "resend chosen": (lambda: waiting_in(Status.CANCELLED), lambda m: queue.resend_many([m], 3)),
    "resend all failed": (lambda: waiting_in(Status.FAILED),
                          lambda _: queue.resend_all_failed(3)),
    "a mailing's resume": (paused_mailing, lambda m: control.resume(m)),
    "sending resumed": (lambda: sending_paused(), lambda _: pause.resume()),
}  # fmt: skip


@on_postgres
@pytest.mark.parametrize("move", MOVES)
def test_a_staff_move_that_makes_messages_due_wakes_the_workers(app, heard, move):
    start, act = MOVES[move]
    chosen = start()
    heard.since_last()  # a mailing's store wakes them: heard before its pause
    act(chosen)
    assert heard.since_last() == [""]


@on_postgres
def test_a_staff_move_that_moves_nothing_wakes_no_one(app, heard):
    sent = waiting_in(Status.CANCELLED)
    with pytest.raises(queue.MoveRefused):
        queue.send_now(sent)  # not deferred
    assert queue.resend_all_failed(3) == 0
    assert pause.resume() is None  # not paused
    assert heard.since_last() == []


@pytest.mark.all_databases
@pytest.mark.parametrize("move", MOVES)
def test_the_probe_sees_a_staff_move_that_makes_messages_due(app, move):
    start, act = MOVES[move]
    chosen = start()
    probe = wakeups.Probe(db.engine)
    try:
        seen = probe.newest()
        assert seen is not None
        act(chosen)
        now = probe.newest()
        assert now is not None and now.newest_id == seen.newest_id
        # PostgreSQL's workers listen: there the move sends NOTIFY and leaves the count.
        assert now.grew(seen) == (db.engine.dialect.name != "postgresql")
    finally:
        probe.close()


@pytest.mark.all_databases
def test_with_wake_ups_off_a_staff_move_leaves_the_probe_as_it_was(app):
    app.config["WAKE_UPS"] = False
    deferred = waiting_in(Status.DEFERRED)
    probe = wakeups.Probe(db.engine)
    try:
        seen = probe.newest()
        queue.send_now(deferred)
        assert probe.newest() == seen
    finally:
        probe.close()


@pytest.mark.all_databases
def test_the_probe_sees_each_new_message_and_each_move(app):
    probe = wakeups.Probe(db.engine)
    try:
        assert probe.newest() == wakeups.Mark(0, 0)  # an empty database, the row gone too
        first = waiting_in(Status.DEFERRED)
        after_store = probe.newest()
        assert after_store == wakeups.Mark(first, 0)
        queue.send_now(first)
        moved = wakeups.Mark(first, 0 if db.engine.dialect.name == "postgresql" else 1)
        assert probe.newest() == moved
    finally:
        probe.close()
