"""Route health and attempts.route: the migration and the workers' notes, on every database."""

import threading
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask_migrate import downgrade, upgrade

from outbox import create_app, queue
from outbox.auth import tokens
from outbox.capabilities.routes import health
from outbox.core.status import Outcome, Retry
from outbox.models import Attempt, RouteHealth
from outbox.models.db import Base, db, dispose_engines
from tests.support.app import base_config

NOW = datetime(2030, 1, 10, 12, 0, 0)
MINE = ("route_health", "route")  # what 0015 adds; other helpers' tables are theirs to check


@pytest.fixture(autouse=True)
def fresh_process():
    """Each test starts as a new worker process would: nothing noted."""
    health.forget()
    yield
    health.forget()


def row(name: str = "relay") -> RouteHealth:
    db.session.expire_all()
    found = db.session.get(RouteHealth, name)
    assert found is not None
    return found


@pytest.mark.all_databases
def test_0015_adds_the_route_of_attempts_and_route_health_and_goes_back(empty_database_url):
    app = create_app(base_config(empty_database_url))
    with app.app_context():
        try:
            upgrade(revision="0014")
            assert "route_health" not in sa.inspect(db.engine).get_table_names()
            upgrade(revision="0015")
            inspector = sa.inspect(db.engine)
            assert "route" in {c["name"] for c in inspector.get_columns("attempts")}
            columns = {c["name"] for c in inspector.get_columns("route_health")}
            assert columns == {"name", "ok_at", "fault_at", "fault", "faults", "failing_since",
                               "noted_at"}  # fmt: skip
            with db.engine.connect() as conn:  # the models and the migration agree
                diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert [d for d in diffs if any(word in repr(d) for word in MINE)] == []
            downgrade(revision="0014")
            inspector = sa.inspect(db.engine)
            assert "route_health" not in inspector.get_table_names()
            assert "route" not in {c["name"] for c in inspector.get_columns("attempts")}
        finally:
            db.session.remove()
            dispose_engines()


@pytest.mark.all_databases
def test_a_recorded_attempt_keeps_its_route_for_the_api(app, make_message, client):
    sent, deferred = make_message(), make_message(to=["b@example.com"])
    claims = {c.id: c for c in queue.claim_batch("w1", 10, now=NOW)}
    long_name = "r" * 64
    queue.record(
        [queue.Finished(claims[sent.id], Outcome.SENT, NOW, route=long_name),
         queue.Finished(claims[deferred.id], Outcome.DEFERRED, NOW, error="421 busy", code=421,
                        route="backup")],
        Retry(60.0, 2.0, 3600.0),
    )  # fmt: skip
    by_message = {a.message_pk: a.route for a in db.session.scalars(sa.select(Attempt))}
    assert by_message == {sent.id: long_name, deferred.id: "backup"}
    token = tokens.create("shop")
    shown = client.get(f"/api/messages/{sent.id}",
                       headers={"Authorization": f"Bearer {token}"}).get_json()  # fmt: skip
    assert [a["route"] for a in shown["attempt_log"]] == [long_name]


@pytest.mark.all_databases
def test_a_lost_workers_attempt_has_no_route(app, make_message):
    make_message(now=NOW)
    queue.claim_batch("w1", 10, now=NOW)
    assert queue.release_stale(60.0, now=NOW + timedelta(hours=1)) == 1
    assert db.session.scalars(sa.select(Attempt.route)).all() == [None]


@pytest.mark.all_databases
def test_notes_write_a_change_at_once_and_the_rest_once_a_second(app, monkeypatch):
    # A window no loaded machine outlasts between two notes: the first write alone took
    # over a second beside stress-ng.
    monkeypatch.setattr(health, "WRITE_EVERY", 3600.0)
    assert health.note("relay", True, None, NOW) is True  # the first note makes the row
    up = row()
    assert (up.ok_at, up.faults, up.failing_since, up.fault) == (NOW, 0, None, None)
    later = NOW + timedelta(seconds=1)
    assert health.note("relay", True, None, later) is False  # within the second: kept
    assert row().ok_at == NOW
    # Up to failing: written at once, whatever the time since the last write.
    assert health.note("relay", False, "cannot connect to smtp.example.com:587", later) is True
    down = row()
    assert (down.faults, down.failing_since, down.fault_at) == (1, later, later)
    assert down.ok_at == later  # the success kept within the second went with it
    assert down.fault == "cannot connect to smtp.example.com:587"
    for n in range(2, 4):
        assert health.note("relay", False, f"timed out {n}", later + timedelta(seconds=n)) is False
    assert row().faults == 1


@pytest.mark.all_databases
def test_faults_add_up_over_processes_and_a_success_clears_them(app, monkeypatch):
    monkeypatch.setattr(health, "WRITE_EVERY", 0.0)  # every note is due: one write each
    health.note("relay", False, "421 4.3.2 try later", NOW)
    health.forget()  # another worker process, which saw the relay fail too
    health.note("relay", False, "x" * 5000, NOW + timedelta(seconds=5))
    down = row()
    assert (down.faults, down.failing_since) == (2, NOW)  # the run began with the first
    assert down.fault == "x" * health.FAULT_CHARS
    health.note("relay", True, None, NOW + timedelta(seconds=9))
    up = row()
    assert (up.faults, up.failing_since, up.ok_at) == (0, None, NOW + timedelta(seconds=9))
    assert up.fault_at == NOW + timedelta(seconds=5)  # the last fault stays for the page
    health.note("relay", False, "again", NOW + timedelta(seconds=20))
    assert (row().faults, row().failing_since) == (1, NOW + timedelta(seconds=20))


@pytest.mark.all_databases
def test_notes_kept_within_the_second_are_counted_in_the_next_write(app, monkeypatch):
    health.note("relay", False, "first", NOW)  # written: a new route, failing
    health.note("relay", False, "second", NOW + timedelta(seconds=1))  # kept
    health.note("relay", True, None, NOW + timedelta(seconds=2))  # a change: written
    health.note("relay", False, "third", NOW + timedelta(seconds=3))  # a change: written
    monkeypatch.setattr(health, "WRITE_EVERY", 0.0)
    health.note("relay", False, "fourth", NOW + timedelta(seconds=4))
    found = row()
    assert (found.faults, found.failing_since, found.fault) == (2, NOW + timedelta(seconds=3),
                                                               "fourth")  # fmt: skip
    assert found.ok_at == NOW + timedelta(seconds=2)


@pytest.mark.all_databases
def test_threads_of_one_process_noting_at_once_make_one_row(app):
    names = [f"route{n}" for n in range(4)]
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        with app.app_context():
            barrier.wait()
            health.note(names[n % 4], n < 4, "fault", NOW)  # two writes a route

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(health.read(names + ["unknown"])) == names


def test_a_note_the_database_refuses_is_logged_and_written_with_the_next(
    empty_database_url, caplog
):
    app = create_app(base_config(empty_database_url))
    with app.app_context():
        try:
            upgrade(revision="0014")  # a schema without route_health
            with caplog.at_level("WARNING", logger="outbox.routes"):
                assert health.note("relay", False, "421 busy", NOW) is False
            assert "route relay: its health could not be written" in caplog.text
            upgrade(revision="0015")
            assert health.note("relay", False, "421 again", NOW + timedelta(seconds=1)) is True
            assert (row().faults, row().fault) == (1, "421 again")
        finally:
            db.session.remove()
            dispose_engines()
