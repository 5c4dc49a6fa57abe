"""Soak: worker processes against an SMTP server that goes away, falls silent, or a poison row."""

import random
import time
from datetime import timedelta
from itertools import groupby

import pytest
import sqlalchemy as sa

from outbox.core.status import Status, retry_delay
from outbox.models import Attachment, AttachmentChunk, Attempt, Message, utcnow
from outbox.models.db import db
from tests.support.rows import enqueue_many, statuses
from tests.support.sink import Sink
from tests.support.smtpd import SilentServer, free_port
from tests.support.soak import (
    ON_MARIADB,
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


def attempts_by_message() -> dict[int, list[Attempt]]:
    rows = db.session.execute(sa.select(Attempt).order_by(Attempt.message_pk, Attempt.id))
    found = {pk: list(group) for pk, group in groupby(rows.scalars(), lambda a: a.message_pk)}
    db.session.commit()
    return found


def watch(seconds: float, check) -> None:  # type: ignore[no-untyped-def]
    """Call check about five times a second for seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.2)


@pytest.mark.parametrize("db_kind", ON_MARIADB)
def test_an_smtp_outage_defers_on_schedule_and_delivers_everything_after(app, workers, tmp_path):
    count, down, width = size(2_000, 60), size(30.0, 3.0), 2
    retry = {"RETRY_DELAY": 0.5, "RETRY_BACKOFF": 2.0, "RETRY_MAX_DELAY": size(8.0, 2.0)}
    expected = enqueue_many(count)
    db.session.execute(sa.update(Message).values(max_attempts=1000))
    db.session.commit()
    sink = Sink(free_port(), tmp_path / "received.txt")  # its port stays closed for now
    pool = Workers(app, sink, tmp_path, POLL_INTERVAL=0.2, BATCH_SIZE=50, **retry)
    workers.append(pool)
    started = time.monotonic()
    for _ in range(width):
        pool.start()

    def nothing_sent_or_failed() -> None:
        counts = statuses()
        assert counts[Status.SENT] == counts[Status.FAILED] == 0, counts

    # Every message has been tried once before the outage is timed.
    wait_until(lambda: not statuses()[Status.QUEUED], timeout=60)
    watch(down, nothing_sent_or_failed)
    back_at = utcnow()
    sink.start()
    try:
        wait_until(lambda: statuses() == {Status.SENT: count}, timeout=300)
        elapsed = time.monotonic() - started
        assert [pool.stop(p) for p in list(pool.running)] == [0] * width
        duplicates, lost = tally(expected, sink.message_ids())
    finally:
        sink.stop()

    deferred = outcomes()["deferred"]
    more = f"down {down:g}s, deferred attempts {deferred}"
    Summary("smtp outage", count, width, 0, duplicates, lost, elapsed, more).show()
    assert (duplicates, lost) == (0, 0)
    assert outcomes() == {"deferred": deferred, "sent": count}
    schedule = [retry["RETRY_DELAY"], retry["RETRY_BACKOFF"], retry["RETRY_MAX_DELAY"]]
    rows = {m.id: m for m in db.session.execute(sa.select(Message)).scalars()}
    for pk, attempts in attempts_by_message().items():
        *refused, sent = attempts
        assert refused, "every message was tried while the server was down"
        assert sent.outcome == "sent" and sent.started_at >= back_at - timedelta(seconds=1)
        for n, (one, then) in enumerate(zip(refused, attempts[1:], strict=True), start=1):
            assert one.outcome == "deferred" and one.smtp_code is None
            assert "Connection refused" in one.error, one.error  # named by smtp.open_host
            wait = timedelta(seconds=retry_delay(n, *schedule))
            assert then.started_at >= one.finished_at + wait
        # The sent attempt leaves next_attempt_at as the last deferral set it.
        assert rows[pk].next_attempt_at - refused[-1].finished_at == wait
        assert rows[pk].attempts == len(attempts)


@pytest.mark.parametrize("db_kind", ON_MARIADB)
def test_a_silent_server_never_lets_a_claim_outlive_its_lock(app, workers, tmp_path):
    count, silent_for, width, lock_timeout = size(1_000, 30), size(40.0, 3.0), 2, 2.0
    expected = enqueue_many(count)
    db.session.execute(sa.update(Message).values(max_attempts=1000))
    db.session.commit()
    with SilentServer(hang_up_after=silent_for + 60) as silent:
        sink = Sink(silent.port, tmp_path / "received.txt")
        settings = {"SMTP_TIMEOUT": 0.5, "LOCK_TIMEOUT": lock_timeout, "BATCH_SIZE": 10}
        retry = {"POLL_INTERVAL": 0.2, "RETRY_DELAY": 0.5, "RETRY_BACKOFF": 1}
        pool = Workers(app, sink, tmp_path, **settings, **retry)
        workers.append(pool)
        started = time.monotonic()
        for _ in range(width):
            pool.start()

        def no_claim_overdue() -> None:
            assert overdue_claims(lock_timeout) == 0

        wait_until(lambda: outcomes()["deferred"] >= width, timeout=60)
        watch(silent_for, no_claim_overdue)
        assert statuses()[Status.SENT] == 0
    sink.start()  # the same port, answering now
    try:
        wait_until(lambda: statuses() == {Status.SENT: count}, timeout=300)
        elapsed = time.monotonic() - started
        assert [pool.stop(p) for p in list(pool.running)] == [0] * width
        duplicates, lost = tally(expected, sink.message_ids())
    finally:
        sink.stop()

    found = outcomes()
    more = f"silent {silent_for:g}s, connections {len(silent.accepted)}, attempts {dict(found)}"
    Summary("silent smtp", count, width, 0, duplicates, lost, elapsed, more).show()
    assert (duplicates, lost) == (0, 0)
    assert found["deferred"] > 0 and found["sent"] == count
    assert set(found) == {"deferred", "sent"}, "no claim was taken from a live worker"
    timed_out = db.session.execute(
        sa.select(sa.func.count()).where(
            Attempt.outcome == "deferred", Attempt.error.like("%timed out%")
        )
    ).scalar_one()
    assert timed_out > 0
    longest = db.session.execute(
        sa.select(Attempt.started_at, Attempt.finished_at).where(Attempt.outcome == "deferred")
    ).all()
    assert max((f - s).total_seconds() for s, f in longest) < lock_timeout


def spoil(message_pk: int, **values: object) -> None:
    """Write straight into a queued row."""
    stmt = sa.update(Message).where(Message.id == message_pk, Message.status == "queued")
    assert db.session.execute(stmt.values(**values)).rowcount == 1
    db.session.commit()


def with_attachments(expected: list[str]) -> tuple[int, list[int]]:
    """Queue a message with two attachments, the first in two chunks; its and their keys."""
    from outbox import queue
    from outbox.core.checks import Upload
    from tests.support.app import draft as make_draft

    data = bytes(range(256)) * (6 * 1024)  # 1.5 MiB: two chunks
    uploads = [Upload("data.bin", "application/octet-stream", data),
               Upload("note.txt", "text/plain", b"hi")]  # fmt: skip
    draft = make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text="see attached",
                  attachments=uploads)  # fmt: skip
    message, _ = queue.enqueue(draft, source="test", max_attempts=5)
    expected.append(message.message_id)
    stmt = sa.select(Attachment.id).where(Attachment.message_pk == message.id)
    return message.id, list(db.session.execute(stmt.order_by(Attachment.id)).scalars())


def delete(stmt: sa.Delete) -> None:
    assert db.session.execute(stmt).rowcount == 1
    db.session.commit()


@pytest.mark.parametrize("db_kind", ON_MARIADB)
def test_poison_messages_fail_alone_and_their_batches_go_out(app, sink, workers, tmp_path):
    count, width = size(5_000, 200), 3
    expected = enqueue_many(count)
    intact, _ = with_attachments(expected)
    no_chunk, (attachment, _) = with_attachments(expected)
    delete(sa.delete(AttachmentChunk).filter_by(attachment_id=attachment, seq=1))
    no_row, (_, attachment) = with_attachments(expected)
    delete(sa.delete(Attachment).filter_by(id=attachment))
    plain = db.session.execute(sa.select(Message.id).order_by(Message.id).limit(count))
    one, two = random.sample(list(plain.scalars()), 2)
    poison = {  # a message that cannot be built or sent, and the error it must fail with
        "headers": (one, {"headers": "X-Campaign: spring"}, "cannot build message: ValueError"),
        "no recipient": (two, {"recipients": []}, "no recipient address"),
        "chunk gone": (no_chunk, {}, "holds 1048576 of its 1572864 bytes"),
        "attachment gone": (no_row, {}, "1 of the message's 2 attachments"),
    }
    for pk, values, _ in poison.values():
        if values:
            spoil(pk, **values)
    pool = Workers(app, sink, tmp_path, BATCH_SIZE=50)
    workers.append(pool)
    started = time.monotonic()
    for _ in range(width):
        pool.start("send-queued")
    outputs = pool.finish(timeout=600)
    elapsed = time.monotonic() - started

    bad = {db.session.get(Message, pk).message_id for pk, _, _ in poison.values()}
    duplicates, lost = tally(sorted(set(expected) - bad), sink.message_ids())
    more = f"failed alone {len(poison)}, workers said {[o.strip() for o in outputs]}"
    Summary("poison", len(expected), width, 0, duplicates, lost, elapsed, more).show()
    assert (duplicates, lost) == (0, 0)
    for name, (pk, _, error) in poison.items():
        row = db.session.get(Message, pk)
        assert (row.status, row.attempts) == (Status.FAILED, 1), name
        assert error in row.last_error, (name, row.last_error)
    assert statuses() == {Status.SENT: len(expected) - len(poison), Status.FAILED: len(poison)}
    assert db.session.get(Message, intact).status == Status.SENT
    assert outcomes() == {"sent": len(expected) - len(poison), "failed": len(poison)}
