"""queue.doorbell: a commit that made messages due rings the doorbells of this host's idle
workers (MariaDB/MySQL and SQLite; on PostgreSQL they hear NOTIFY instead), and a worker's
doorbell wakes it."""

import logging
import os
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from outbox import queue
from outbox.core.status import Status
from outbox.models import utcnow
from outbox.models.db import db
from outbox.queue import doorbell, inserts, store
from tests.support.app import draft as make_draft
from tests.support.rows import store as write_row

SERVERS_WITHOUT_NOTIFY = [pytest.param("mariadb", marks=pytest.mark.mariadb), "sqlite"]


class Door:
    """A doorbell of the test's own in the app's folder: counts the rings it got."""

    def __init__(self, place: Path, name: str = "test") -> None:
        place.mkdir(mode=0o700, exist_ok=True)
        self.path = place / name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.setblocking(False)

    def rings(self) -> int:
        """The rings since the last call."""
        count = 0
        while True:
            try:
                self.sock.recv(1)
            except BlockingIOError:
                return count
            count += 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def door(app) -> Iterator[Door]:  # type: ignore[no-untyped-def]
    found = Door(doorbell.folder(app))
    yield found
    found.close()


def draft(n: int, **fields: object):  # type: ignore[no-untyped-def]
    return make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text=f"{n}",
                      **fields)  # fmt: skip


@pytest.mark.all_databases
def test_each_commit_that_makes_messages_due_rings_once(app, door):
    rings = 0 if db.engine.dialect.name == "postgresql" else 1  # there: NOTIFY
    queue.enqueue(draft(1), source="test", max_attempts=3)  # the single message's INSERT
    assert door.rings() == rings
    queue.enqueue_batch([draft(n) for n in range(30)], source="test", max_attempts=3)
    assert door.rings() == rings
    row = store.message_row(draft(2), utcnow(), source="test", max_attempts=3)
    inserts.insert_row(row)
    assert door.rings() == 0  # not before the commit
    db.session.commit()
    assert door.rings() == rings
    later = utcnow() + timedelta(days=1)
    deferred, _ = queue.enqueue(draft(3, send_after=later), source="test", max_attempts=3)
    assert door.rings() == 0  # not due: nothing to wake for
    write_row(deferred.id, Status.QUEUED, status=Status.DEFERRED.value, send_after=None,
              next_attempt_at=later)  # fmt: skip
    queue.send_now(deferred.id)  # a staff move: due by an UPDATE
    assert door.rings() == rings


@pytest.mark.parametrize("db_kind", SERVERS_WITHOUT_NOTIFY)
def test_a_rolled_back_store_rings_no_one_and_the_next_commit_rings_once(app, door):
    row = store.message_row(draft(1), utcnow(), source="test", max_attempts=3)
    inserts.insert_row(row)
    db.session.rollback()
    db.session.commit()  # an empty transaction after it: nothing left marked
    assert door.rings() == 0
    queue.enqueue(draft(2), source="test", max_attempts=3)
    assert door.rings() == 1


@pytest.mark.parametrize("db_kind", SERVERS_WITHOUT_NOTIFY)
def test_with_wake_ups_off_nothing_rings(app, door):
    app.config["WAKE_UPS"] = False
    queue.enqueue(draft(1), source="test", max_attempts=3)
    queue.enqueue_batch([draft(n) for n in range(3)], source="test", max_attempts=3)
    assert door.rings() == 0


def test_a_dead_workers_doorbell_is_taken_away_and_the_others_still_ring(app, door):
    dead = Door(doorbell.folder(app), "dead")
    dead.close()  # its file stays, no one reads it: a worker killed outright
    queue.enqueue(draft(1), source="test", max_attempts=3)
    assert door.rings() == 1
    assert not dead.path.exists()
    assert sorted(os.listdir(doorbell.folder(app))) == ["test"]


def test_a_workers_bell_wakes_it_and_goes_away_when_closed(app):
    woken, stop = threading.Event(), threading.Event()
    bell = doorbell.Bell(app, woken)
    assert bell.path is not None and bell.path.parent == doorbell.folder(app)
    waiting = threading.Thread(target=bell.run, args=(stop,))
    waiting.start()
    try:
        queue.enqueue(draft(1), source="test", max_attempts=3)
        assert woken.wait(60)
    finally:
        stop.set()
        bell.close()
        waiting.join()
    assert os.listdir(doorbell.folder(app)) == []


def test_without_a_place_for_its_doorbell_a_worker_says_so_and_goes_on(app, tmp_path, caplog):
    app.instance_path = str(tmp_path / ("x" * 110))  # too long for a socket's path
    with caplog.at_level(logging.INFO, logger="outbox.worker"):
        bell = doorbell.Bell(app, threading.Event())
    assert bell.sock is None and bell.path is None
    assert "woken by the probe alone" in caplog.text
    bell.close()  # nothing to take away
