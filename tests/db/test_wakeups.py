"""queue.wakeups: what a store tells the listening workers (PostgreSQL), and the probe."""

from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from outbox import queue
from outbox.models import utcnow
from outbox.models.db import db
from outbox.queue import inserts, store, wakeups
from tests.support.app import draft as make_draft


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
