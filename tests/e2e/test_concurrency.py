"""Real worker processes against real databases: parallel drains, SIGKILL and SIGTERM."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from outbox.core.status import Status
from outbox.models import Attempt
from outbox.models.db import db
from tests.support import processes
from tests.support.rows import enqueue_many, statuses
from tests.support.workers import OUTBOX, wait_until, worker_env


@pytest.mark.all_databases
def test_parallel_workers_send_every_message_exactly_once(smtp_app, smtp, db_kind, tmp_path):
    count = 500 if db_kind == "sqlite" else 2000
    expected = enqueue_many(count)
    env = worker_env(smtp_app, smtp, tmp_path)
    started = time.monotonic()
    workers = [
        processes.start([*OUTBOX, "send-queued"], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    try:
        outputs = [w.communicate(timeout=300)[0] for w in workers]
    finally:
        for w in workers:
            processes.kill_group(w)
    elapsed = time.monotonic() - started
    assert [w.returncode for w in workers] == [0, 0, 0, 0]

    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(expected)
    assert max(received.values()) == 1, "a message was sent twice"
    assert statuses() == {Status.SENT: count}
    sent_by_each = [int(out.split("sent ")[-1].split(",")[0]) for out in outputs]
    assert sum(sent_by_each) == count
    print(f"\n{db_kind}: 4 workers sent {count} in {elapsed:.1f}s = {count / elapsed:.0f}/s, "
          f"per worker {sent_by_each}")  # fmt: skip


@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_killed_worker_loses_nothing_and_leaves_nothing_sending(smtp_app, smtp, tmp_path):
    expected = enqueue_many(300)
    smtp.recorder.delay = 0.01
    env = worker_env(
        smtp_app, smtp, tmp_path, SMTP_TIMEOUT=0.5, LOCK_TIMEOUT=2, POLL_INTERVAL=60, RECORD_EVERY=5
    )
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.DEVNULL) as victim:
        wait_until(lambda: len(smtp.received) >= 30, timeout=processes.START_TIMEOUT)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
    assert statuses()[Status.SENDING] > 0, "the kill should leave claimed messages behind"

    time.sleep(2.2)  # let the dead worker's claims pass LOCK_TIMEOUT
    smtp.recorder.delay = 0
    rescuer = subprocess.run(
        [*OUTBOX, "send-queued"], env=env, capture_output=True, text=True, timeout=120
    )
    assert rescuer.returncode == 0, rescuer.stderr
    assert statuses() == {Status.SENT: 300}
    received = Counter(smtp.recorder.message_ids())
    assert set(received) == set(expected)
    duplicates = sum(n - 1 for n in received.values())
    # At most RECORD_EVERY outcomes wait unwritten, so at most that many repeat.
    assert duplicates <= 5
    lost = db.session.query(Attempt).filter_by(outcome="worker lost").count()
    assert lost >= 1


@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_sigterm_finishes_the_message_in_hand_and_hands_back_the_rest(smtp_app, smtp, tmp_path):
    expected = enqueue_many(200)
    smtp.recorder.delay = 0.02
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=60)
    with processes.group([*OUTBOX, "worker"], env=env, stderr=subprocess.PIPE, text=True) as worker:
        wait_until(lambda: len(smtp.received) >= 10, timeout=processes.START_TIMEOUT)
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=30)
    assert worker.returncode == 0, log
    counts = statuses()
    assert counts[Status.SENDING] == 0
    assert counts[Status.QUEUED] > 0, "the rest of the batch should be handed back"
    assert counts[Status.SENT] == len(smtp.received)
    assert "stopped" in log

    smtp.recorder.delay = 0
    subprocess.run([*OUTBOX, "send-queued"], env=env, check=True, capture_output=True)
    received = Counter(smtp.recorder.message_ids())
    assert sorted(received) == sorted(expected) and max(received.values()) == 1
    assert db.session.query(Attempt).filter_by(outcome="worker lost").count() == 0


def children_of(pid: int) -> list[int]:
    """The processes pid started (Linux /proc)."""
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(child) for child in found)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_worker_processes_share_the_queue_restart_when_killed_and_stop_together(
    smtp_app, smtp, tmp_path
):
    expected = enqueue_many(300)
    smtp.recorder.delay = 0.005
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=1, BATCH_SIZE=10, SMTP_TIMEOUT=0.5,
                     LOCK_TIMEOUT=2)  # fmt: skip
    command = [*OUTBOX, "worker", "--processes", "2"]
    parent = processes.start(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(children_of(parent.pid)) == 2, timeout=processes.START_TIMEOUT)
        first = children_of(parent.pid)
        wait_until(lambda: len(smtp.received) >= 50, timeout=processes.START_TIMEOUT)
        os.kill(first[0], signal.SIGKILL)
        wait_until(lambda: len(children_of(parent.pid)) == 2 and children_of(parent.pid) != first,
                   timeout=processes.START_TIMEOUT)  # fmt: skip
        wait_until(lambda: statuses() == {Status.SENT: 300}, timeout=120)
        parent.send_signal(signal.SIGTERM)
        _, log = parent.communicate(timeout=processes.START_TIMEOUT)
    finally:
        # Left running, the processes would go on claiming the next tests' messages.
        processes.kill_group(parent)
    assert parent.returncode == 0, log
    assert "worker processes stopped: exit codes [0, 0]" in log
    assert set(smtp.recorder.message_ids()) == set(expected)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_worker_processes_stop_when_their_supervisor_is_killed(smtp_app, smtp, tmp_path):
    env = worker_env(smtp_app, smtp, tmp_path, POLL_INTERVAL=60)
    parent = processes.start([*OUTBOX, "worker", "--processes", "2"], env=env,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    children: list[int] = []
    try:
        wait_until(lambda: len(children_of(parent.pid)) == 2, timeout=processes.START_TIMEOUT)
        children = children_of(parent.pid)
        parent.kill()
        parent.wait()
        wait_until(lambda: not any(Path(f"/proc/{c}").exists() for c in children), timeout=30)
    finally:
        processes.kill_group(parent)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
