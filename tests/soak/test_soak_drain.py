"""Soak: many worker processes drain a big queue; workers killed or stopped on the way."""

import contextlib
import random
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox.core.status import Status
from outbox.models import Message, utcnow
from outbox.models.db import db
from tests.support.rows import enqueue_many, statuses
from tests.support.soak import (
    ON_MARIADB,
    ON_SERVERS,
    SOAK,
    Summary,
    Workers,
    outcomes,
    overdue_claims,
    sink_fixture,  # noqa: F401
    size,
    tally,
    workers_fixture,  # noqa: F401
)
from tests.support.workers import wait_until

pytestmark = pytest.mark.soak


def allow_attempts(count: int) -> None:
    """Give every message count attempts, so that reclaims alone never fail one."""
    db.session.execute(sa.update(Message).values(max_attempts=count))
    db.session.commit()


@pytest.mark.parametrize("db_kind", ON_SERVERS)
def test_many_workers_send_every_message_exactly_once(app, sink, workers, db_kind, tmp_path):
    count, width = size(50_000, 300), size(8, 4)
    expected = enqueue_many(count)
    pool = Workers(app, sink, tmp_path, BATCH_SIZE=size(100, 50))
    workers.append(pool)
    started = time.monotonic()
    for _ in range(width):
        pool.start("send-queued")
    outputs = pool.finish(timeout=3600)
    elapsed = time.monotonic() - started

    duplicates, lost = tally(expected, sink.message_ids())
    sent_by_each = [int(out.split("sent ")[-1].split(",")[0]) for out in outputs]
    more = f"sent by each worker {sent_by_each}"
    Summary(f"many workers, {db_kind}", count, width, 0, duplicates, lost, elapsed, more).show()
    assert (duplicates, lost) == (0, 0)
    assert sum(sent_by_each) == count
    assert statuses() == {Status.SENT: count}
    assert outcomes() == {"sent": count}


def claim_age() -> float:
    """Seconds since the oldest claim still in sending was made or renewed."""
    oldest = db.session.execute(
        sa.select(sa.func.min(Message.locked_at)).where(Message.status == Status.SENDING.value)
    ).scalar()
    db.session.commit()
    return 0.0 if oldest is None else (utcnow() - oldest).total_seconds()


@pytest.mark.parametrize("db_kind", ON_MARIADB)
def test_killed_workers_lose_nothing_and_repeat_at_most_a_group_each(app, sink, workers, tmp_path):
    count, width, lock_timeout, group = size(20_000, 400), 4, 3.0, 10
    expected = enqueue_many(count)
    allow_attempts(100)
    pool = Workers(app, sink, tmp_path, SMTP_TIMEOUT=0.5, LOCK_TIMEOUT=lock_timeout,
                   POLL_INTERVAL=0.5, BATCH_SIZE=50, RECORD_EVERY=group)  # fmt: skip
    workers.append(pool)
    seed = random.randrange(1 << 30)
    pick = random.Random(seed)
    started = time.monotonic()
    for _ in range(width):
        pool.start()
    kills, oldest = 0, 0.0
    while statuses()[Status.QUEUED]:
        time.sleep(pick.uniform(2.0, 5.0) if SOAK else pick.uniform(0.5, 1.5))
        pool.kill(pick.choice(pool.running))
        kills += 1
        pool.start()
        oldest = max(oldest, claim_age())
    # The live workers take back what the killed ones held, once their claims expire.
    wait_until(lambda: statuses() == {Status.SENT: count}, timeout=120)
    elapsed = time.monotonic() - started
    assert [pool.stop(p) for p in list(pool.running)] == [0] * width
    assert pool.rescue() == "sent 0, deferred 0, failed 0\n"

    duplicates, lost = tally(expected, sink.message_ids())
    reclaimed = outcomes()["worker lost"]
    more = f"claims taken back {reclaimed}, oldest claim seen {oldest:.1f}s, seed {seed}"
    Summary("crashes", count, width, kills, duplicates, lost, elapsed, more).show()
    assert lost == 0
    # At most RECORD_EVERY outcomes wait unwritten: a kill repeats at most those.
    assert duplicates <= kills * group
    assert statuses() == {Status.SENT: count}
    assert overdue_claims(0) == 0


def held_by(process) -> int:  # type: ignore[no-untyped-def]
    """Messages still claimed by the worker process."""
    stmt = sa.select(sa.func.count()).where(
        Message.status == Status.SENDING.value, Message.locked_by.like(f"%:{process.pid}:%")
    )
    found = db.session.execute(stmt).scalar_one()
    db.session.commit()
    return found


def sent_ids() -> set[str]:
    stmt = sa.select(Message.message_id).where(Message.status == Status.SENT.value)
    found = set(db.session.execute(stmt).scalars())
    db.session.commit()
    return found


@pytest.mark.parametrize("db_kind", ON_MARIADB)
# Each mail takes the sink 5 ms, so the stop lands inside a batch: at full speed a
# worker sent the short run's whole queue before the test's SIGTERM reached it.
@pytest.mark.parametrize("sink", [0.005], indirect=True)
def test_sigterm_finishes_the_message_in_hand_and_hands_back_the_rest(app, sink, workers, tmp_path):
    count, rounds = size(5_000, 400), size(8, 2)
    expected = enqueue_many(count)
    pool = Workers(app, sink, tmp_path, POLL_INTERVAL=60, BATCH_SIZE=50)
    workers.append(pool)
    pick = random.Random()
    started, handed_back = time.monotonic(), 0
    for _ in range(rounds):
        before = sink.count()
        worker = pool.start()
        sink.wait_for(before + pick.randint(1, 120), timeout=120)
        asked = time.monotonic()
        assert pool.stop(worker) == 0
        assert time.monotonic() - asked < 30, "the stop waited for the next poll"
        log = pool.log(worker)
        assert "SIGTERM received, stopping" in log and log.endswith("stopped\n"), log
        handed_back += sum(int(line.rsplit("handed back ", 1)[1].split()[0])
                           for line in log.splitlines() if "handed back" in line)  # fmt: skip
        # Alone, the worker left nothing claimed, and what the server got is what is
        # marked sent: the message in hand was finished and recorded.
        assert held_by(worker) == 0
        assert set(sink.message_ids()) == sent_ids()
    pool.rescue()
    elapsed = time.monotonic() - started

    duplicates, lost = tally(expected, sink.message_ids())
    more = f"SIGTERMs {rounds}, handed back {handed_back}"
    Summary("graceful stop", count, 1, 0, duplicates, lost, elapsed, more).show()
    assert (duplicates, lost) == (0, 0)
    assert handed_back > 0
    assert statuses() == {Status.SENT: count}
    assert outcomes() == {"sent": count}


def blocked_signals(pid: int) -> list[int]:
    """The blocked-signal mask of each thread but the main one (Linux)."""
    masks = []
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        if status.parent.name == str(pid):
            continue  # in sigwait, which unblocks what it waits for while it waits
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            line = next(x for x in status.read_text().splitlines() if x.startswith("SigBlk:"))
            masks.append(int(line.split()[1], 16))
    return masks


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("db_kind", ON_MARIADB)
def test_sigterm_reaches_a_busy_worker_at_once(app, sink, workers, tmp_path):
    # The kernel hands a signal to any thread that does not block it, and Python runs
    # handlers only in the main thread: one handed to the busy drain thread waited for
    # the scheduler's next wake-up. Blocked in every other thread, it goes to sigwait.
    enqueue_many(size(20_000, 2_000))
    pool = Workers(app, sink, tmp_path, POLL_INTERVAL=60, BATCH_SIZE=50)
    workers.append(pool)
    worker = pool.start()
    sink.wait_for(100, timeout=120)
    masks = blocked_signals(worker.pid)
    stops = 1 << (signal.SIGTERM - 1) | 1 << (signal.SIGINT - 1)
    assert len(masks) >= 2, "the scheduler's thread and the drain's"
    assert [m & stops for m in masks] == [stops] * len(masks)
    asked = time.monotonic()
    assert pool.stop(worker) == 0
    assert time.monotonic() - asked < 30, "the stop waited for the next poll"
    assert statuses()[Status.QUEUED] > 0, "stopped while busy"
