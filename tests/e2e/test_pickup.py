"""Immediate pickup: an idle `outbox worker` sends a message stored due now, or made due by
staff, at once, not at its next tick; with wake-ups lost or turned off, the tick still sends
every message.

The tests' app and the workers they start share an instance folder (tmp_path), as the
processes of one host do: on MariaDB and SQLite the tests' commits ring the workers'
doorbells (queue.doorbell), unless a test moves the app's folder away to stand for
another host, whose workers only the probe wakes.
"""

import subprocess
from collections import Counter
from datetime import timedelta

import pytest
import sqlalchemy as sa

from outbox import queue
from outbox.core.status import Status
from outbox.models import WorkerBeat, utcnow
from outbox.models.db import db
from outbox.queue import doorbell
from tests.support import processes
from tests.support.app import draft
from tests.support.rows import store as write_row
from tests.support.workers import OUTBOX, wait_until, worker_env

# Far past how long any wait here may take on a loaded machine: a mail that comes
# before the worker's second tick came because it was woken.
LONG_POLL = 900
ARRIVAL = 120.0  # seconds: a guard against a hang, not a measure of speed
WITHOUT_NOTIFY = [pytest.param("mariadb", marks=pytest.mark.mariadb), "sqlite"]


def store(n: int) -> str:
    """One message, as the API stores it; its Message-ID."""
    message, _ = queue.enqueue(
        draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text=f"{n}"),
        source="test",
        max_attempts=3,
    )
    return str(message.message_id)


def waiting_in(status: Status, n: int) -> tuple[int, str]:
    """A message in status, not due for a day, put there behind the queue's back (no
    wake-up); its id and Message-ID."""
    later = utcnow() + timedelta(days=1)
    message, _ = queue.enqueue(
        draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text=f"{n}",
              send_after=later),
        source="test",
        max_attempts=3,
    )  # fmt: skip
    write_row(message.id, Status.QUEUED, status=status.value, send_after=None,
              next_attempt_at=later)  # fmt: skip
    return message.id, str(message.message_id)


def store_batch(first: int, count: int) -> list[str]:
    """count messages in one request's batch; their Message-IDs."""
    drafts = [draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text=f"{n}")
              for n in range(first, first + count)]  # fmt: skip
    queued, _ = queue.enqueue_batch(drafts, source="test", max_attempts=3)
    return [q.message_id for q in queued]


def beating() -> int:
    """Workers that have started a pass (each beats as its first pass begins)."""
    found = db.session.execute(sa.select(sa.func.count(WorkerBeat.worker_id))).scalar()
    db.session.commit()
    return int(found or 0)


def arrived(smtp, wanted: list[str]) -> bool:  # type: ignore[no-untyped-def]
    return set(wanted) <= set(smtp.recorder.message_ids())


def listeners() -> set[int]:
    """The server pids of the connections listening for wake-ups (PostgreSQL)."""
    stmt = sa.text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN %'"
    )
    found = set(db.session.execute(stmt).scalars())
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_a_message_stored_for_an_idle_worker_is_sent_at_once(smtp_app, smtp, tmp_path):
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=LONG_POLL)
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE) as worker:
        wait_until(lambda: beating() == 1, timeout=processes.START_TIMEOUT)
        first = [store(0)]  # may come while the first pass runs: sent by it or the next
        wait_until(lambda: arrived(smtp, first), timeout=ARRIVAL)
        wanted = [*first]
        for n in range(1, 4):  # the worker is idle now: each one wakes it
            wanted.append(store(n))
            wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        wanted += store_batch(10, 5)  # a batch: one wake-up for all of it
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(wanted) and max(received.values()) == 1


@pytest.mark.all_databases
def test_messages_staff_make_due_are_sent_at_once_by_an_idle_worker(smtp_app, smtp, tmp_path):
    deferred, deferred_mid = waiting_in(Status.DEFERRED, 1)
    failed, failed_mid = waiting_in(Status.FAILED, 2)
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=LONG_POLL)
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE) as worker:
        wait_until(lambda: beating() == 1, timeout=processes.START_TIMEOUT)
        wanted = [store(0)]  # sent: the worker is past its first pass, idle and waiting
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        queue.send_now(deferred)  # "Send now": due by an UPDATE, no new row
        wanted.append(deferred_mid)
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        queue.resend(failed, 3)  # "Resend"
        wanted.append(failed_mid)
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(wanted) and max(received.values()) == 1


@pytest.mark.parametrize("db_kind", WITHOUT_NOTIFY)
def test_an_idle_worker_rung_by_its_doorbell_sends_at_once_without_probing(
    smtp_app, smtp, tmp_path
):
    deferred, deferred_mid = waiting_in(Status.DEFERRED, 1)
    # Neither the tick nor the probe comes within the test: what is sent, a ring sent.
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=LONG_POLL, WAKE_INTERVAL=LONG_POLL)
    bells = doorbell.folder(smtp_app)
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE) as worker:
        wait_until(lambda: beating() == 1 and bells.is_dir() and any(bells.iterdir()),
                   timeout=processes.START_TIMEOUT)  # fmt: skip
        wanted = [store(0)]
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        for n in range(1, 3):
            wanted.append(store(n))
            wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        wanted += store_batch(10, 5)
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        queue.send_now(deferred)  # a staff move rings too
        wanted.append(deferred_mid)
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
        assert processes.end(worker) == 0
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(wanted) and max(received.values()) == 1
    assert list(bells.iterdir()) == []  # the worker took its doorbell away as it stopped


@pytest.mark.parametrize("db_kind", WITHOUT_NOTIFY)
def test_a_worker_no_ring_reaches_is_woken_by_its_probe(smtp_app, smtp, tmp_path):
    smtp_app.instance_path = str(tmp_path / "another-host")  # the rings go there
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=LONG_POLL)
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE) as worker:
        wait_until(lambda: beating() == 1, timeout=processes.START_TIMEOUT)
        wanted = [store(0)]
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        wanted += [store(1), *store_batch(10, 3)]
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    assert not doorbell.folder(smtp_app).exists()  # no worker there: no one was rung
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(wanted) and max(received.values()) == 1


@pytest.mark.all_databases
@pytest.mark.parametrize("worker_wakes", [True, False], ids=["wake-ups-lost", "wake-ups-off"])
def test_without_wake_ups_the_tick_still_sends_every_message(
    smtp_app, smtp, tmp_path, worker_wakes
):
    smtp_app.config["WAKE_UPS"] = False  # stores without NOTIFY: any wake-up is lost
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=0.5,
                     WAKE_UPS=str(worker_wakes).lower(), WAKE_INTERVAL=3600)  # fmt: skip
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE) as worker:
        wait_until(lambda: beating() == 1, timeout=processes.START_TIMEOUT)
        wanted = [store(n) for n in range(5)] + store_batch(10, 5)
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(wanted) and max(received.values()) == 1


@pytest.mark.parametrize("db_kind", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_worker_whose_listening_connection_was_cut_listens_again(smtp_app, smtp, tmp_path):
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=LONG_POLL)
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE) as worker:
        wait_until(lambda: beating() == 1 and listeners(), timeout=processes.START_TIMEOUT)
        cut = listeners()
        for pid in cut:
            db.session.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        db.session.commit()
        wait_until(lambda: listeners() and not listeners() & cut, timeout=ARRIVAL)
        wanted = [store(0)]
        wait_until(lambda: arrived(smtp, wanted), timeout=ARRIVAL)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    assert Counter(smtp.recorder.message_ids()) == {wanted[0]: 1}
