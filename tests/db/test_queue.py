"""Queue moves on SQLite, MariaDB and PostgreSQL: claim, outcomes, stale claims, resend."""

import random
import re
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pymysql
import pytest
import sqlalchemy as sa

import outbox
from outbox import queue
from outbox.core.status import MOVES, Outcome, Retry, Status
from outbox.models import Attempt, Message, utcnow
from outbox.models.db import db
from outbox.queue import moves, store
from tests.support import outcomes
from tests.support.app import draft as make_draft
from tests.support.rows import fresh

# Claims, locks, guarded moves and the types stored: every test here runs on each database.
pytestmark = pytest.mark.all_databases
RETRY = Retry(delay=60, backoff=2, max_delay=3600)


def test_claim_takes_due_messages_by_priority_then_due_time(app, make_message):
    now = utcnow()
    low = make_message(priority=0, now=now - timedelta(seconds=30))
    high = make_message(priority=5, now=now)
    older_low = make_message(priority=0, now=now - timedelta(seconds=60))
    later = make_message(send_after=now + timedelta(hours=1), now=now)
    claims = queue.claim_batch("w1", 10, now=now)
    assert [c.id for c in claims] == [high.id, older_low.id, low.id]
    assert fresh(later.id).status == Status.QUEUED
    row = fresh(high.id)
    assert (row.status, row.locked_by) == (Status.SENDING, "w1")


def test_claim_respects_the_limit_and_never_hands_out_a_row_twice(app, make_message):
    ids = {make_message().id for _ in range(7)}
    first = queue.claim_batch("w1", 4)
    second = queue.claim_batch("w2", 4)
    assert len(first) == 4 and len(second) == 3
    assert {c.id for c in first} | {c.id for c in second} == ids
    assert queue.claim_batch("w3", 4) == []
    assert not queue.has_due()


def test_mark_sent_records_the_attempt(app, make_message):
    message = make_message()
    (claim,) = queue.claim_batch("w1", 10)
    assert outcomes.sent(claim, utcnow())
    row = fresh(message.id)
    assert (row.status, row.attempts, row.locked_by) == (Status.SENT, 1, None)
    assert row.sent_at is not None
    attempt = db.session.query(Attempt).filter_by(message_pk=message.id).one()
    assert (attempt.outcome, attempt.worker_id) == ("sent", "w1")


def test_deferral_waits_the_backoff_delay_then_fails_when_attempts_run_out(app, make_message):
    message = make_message(max_attempts=3)
    now = utcnow()
    waits = []
    for _ in range(2):
        (claim,) = queue.claim_batch("w1", 10, now=now)
        assert outcomes.deferred(claim, now, 451, "451 try later", RETRY) is Status.DEFERRED
        row = fresh(message.id)
        waits.append((row.next_attempt_at - now).total_seconds())
        assert queue.claim_batch("w1", 10, now=now) == []  # not due yet
        now = row.next_attempt_at
    assert waits == [60, 120]
    (claim,) = queue.claim_batch("w1", 10, now=now)
    assert outcomes.deferred(claim, now, 451, "451 try later", RETRY) is Status.FAILED
    row = fresh(message.id)
    assert (row.status, row.attempts) == (Status.FAILED, 3)
    assert "gave up after 3 attempts" in row.last_error


def test_outcome_is_refused_without_the_claim(app, make_message):
    make_message()
    (claim,) = queue.claim_batch("w1", 10)
    thief = queue.Claim(claim.id, "w2", claim.attempts, claim.max_attempts, claim.started_at)
    assert not outcomes.sent(thief, utcnow())
    assert fresh(claim.id).status == Status.SENDING
    assert db.session.query(Attempt).count() == 0


@pytest.mark.parametrize("lost", [0, 1, 2])
def test_a_group_records_only_the_claims_still_held(app, make_message, lost):
    for _ in range(4):
        make_message()
    claims = queue.claim_batch("w1", 10)
    taken = [c.id for c in claims[:lost]]  # as if reclaimed and claimed by another worker
    db.session.execute(sa.update(Message).where(Message.id.in_(taken)).values(locked_by="w2"))
    db.session.commit()
    now = utcnow()
    finished = [queue.Finished(c, Outcome.SENT, now) for c in claims[:3]]
    finished.append(queue.Finished(claims[3], Outcome.FAILED, now, 550, "550 no such user"))
    recorded = queue.record(finished)
    expected = {c.id: Status.SENT for c in claims[lost:3]} | {claims[3].id: Status.FAILED}
    assert recorded == expected
    assert {a.message_pk for a in db.session.query(Attempt)} == set(expected)
    for claim in claims:
        row = fresh(claim.id)
        if claim.id in taken:
            assert (row.status, row.locked_by, row.attempts) == (Status.SENDING, "w2", 0)
        else:
            assert (row.status, row.locked_by, row.attempts) == (expected[claim.id], None, 1)


def test_stale_claims_are_taken_back_as_worker_lost(app, make_message):
    then = utcnow() - timedelta(seconds=1000)
    message = make_message(now=then)
    (claim,) = queue.claim_batch("dead-worker", 10, now=then)
    assert queue.release_stale(lock_timeout=900) == 1
    row = fresh(message.id)
    assert (row.status, row.attempts, row.locked_by) == (Status.DEFERRED, 1, None)
    attempt = db.session.query(Attempt).one()
    assert (attempt.outcome, attempt.worker_id) == ("worker lost", "dead-worker")
    # The dead worker's late outcome no longer counts.
    assert not outcomes.sent(claim, utcnow())
    assert [c.id for c in queue.claim_batch("w2", 10)] == [message.id]


def test_fresh_claims_are_left_alone(app, make_message):
    make_message()
    queue.claim_batch("w1", 10)
    assert queue.release_stale(lock_timeout=900) == 0


def test_renew_reports_only_claims_still_held(app, make_message):
    then = utcnow() - timedelta(seconds=1000)
    a, b = make_message(now=then), make_message(now=then)
    claims = queue.claim_batch("w1", 10, now=then)
    queue.release_stale(lock_timeout=900)
    queue.claim_batch("w2", 1)
    assert queue.renew(claims, utcnow()) == set()
    claims = queue.claim_batch("w1", 10)
    assert queue.renew(claims, utcnow()) == {c.id for c in claims}
    assert {a.id, b.id} >= {c.id for c in claims}


def test_release_hands_back_unstarted_messages(app, make_message):
    new, retried = make_message(), make_message()
    now = utcnow()
    claims = queue.claim_batch("w1", 10, now=now)
    retry_claim = next(c for c in claims if c.id == retried.id)
    outcomes.deferred(retry_claim, now, 451, "later", Retry(0, 1, 0))
    (retry_claim,) = queue.claim_batch("w1", 10, now=utcnow())
    claims = [c for c in claims if c.id == new.id] + [retry_claim]
    assert queue.release(claims) == 2
    assert fresh(new.id).status == Status.QUEUED
    assert fresh(retried.id).status == Status.DEFERRED
    assert fresh(new.id).locked_by is None


def test_cancel_and_resend(app, make_message):
    message = make_message(max_attempts=1)
    queue.cancel(message.id)
    assert fresh(message.id).status == Status.CANCELLED
    with pytest.raises(queue.MoveRefused):
        queue.cancel(message.id)
    queue.resend(message.id, allowance=3)
    row = fresh(message.id)
    assert (row.status, row.max_attempts) == (Status.QUEUED, 3)
    (claim,) = queue.claim_batch("w1", 10)
    outcomes.failed(claim, utcnow(), 550, "550 no such user")
    queue.resend(message.id, allowance=3)
    row = fresh(message.id)
    assert (row.status, row.attempts, row.max_attempts) == (Status.QUEUED, 1, 4)
    (claim,) = queue.claim_batch("w1", 10)
    outcomes.sent(claim, utcnow())
    with pytest.raises(queue.MoveRefused):
        queue.resend(message.id, allowance=3)
    with pytest.raises(queue.MoveRefused):
        queue.cancel(message.id)


@pytest.mark.all_databases
def test_moves_of_chosen_messages_move_only_those_their_status_allows(app, make_message):
    queued, deferred, sending, failed, gone = (make_message().id for _ in range(5))
    claims = {c.id: c for c in queue.claim_batch("w1", 10)}
    retry = Retry(delay=60, backoff=2, max_delay=3600)
    outcomes.deferred(claims[deferred], utcnow(), 451, "451 later", retry)
    outcomes.failed(claims[failed], utcnow(), 550, "550 no such user")
    for pk in (queued, gone):  # taken back unsent
        queue.release([claims[pk]])
    assert queue.cancel_many([queued, deferred, sending, failed, queued]) == queue.Moved(2, 2)
    assert [fresh(pk).status for pk in (queued, deferred, sending, failed)] == [
        Status.CANCELLED, Status.CANCELLED, Status.SENDING, Status.FAILED
    ]  # fmt: skip
    assert queue.resend_many([queued, failed, sending, 987654], allowance=3) == queue.Moved(2, 2)
    rows = {pk: fresh(pk) for pk in (queued, failed, sending)}
    assert [r.status for r in rows.values()] == [Status.QUEUED, Status.QUEUED, Status.SENDING]
    assert rows[failed].max_attempts == rows[failed].attempts + 3
    assert queue.cancel_many([]) == queue.Moved(0, 0)
    assert fresh(gone).status == Status.QUEUED  # never chosen, never moved


def test_attachments_are_stored_in_chunks_and_read_back_whole(app, make_message):
    from outbox.core.checks import Upload
    from outbox.models import CHUNK_BYTES, AttachmentChunk

    big = bytes(range(256)) * (CHUNK_BYTES // 256 * 2 + 10)
    message = make_message(attachments=[Upload("a.bin", "application/octet-stream", big),
                                        Upload("b.txt", "text/plain", b"hi")])  # fmt: skip
    assert db.session.query(AttachmentChunk).count() == 4
    assert queue.read_attachments(message.id) == [
        Upload("a.bin", "application/octet-stream", big),
        Upload("b.txt", "text/plain", b"hi"),
    ]


def test_attachments_missing_a_chunk_or_a_row_are_damaged_not_read_short(app, make_message):
    from sqlalchemy import delete

    from outbox.core.checks import Upload
    from outbox.models import CHUNK_BYTES, Attachment, AttachmentChunk

    big = bytes(range(256)) * (CHUNK_BYTES // 256 + 10)
    uploads = [
        Upload("a.bin", "application/octet-stream", big),
        Upload("b.txt", "text/plain", b"hi"),
    ]
    message = make_message(attachments=uploads)
    first, second = db.session.query(Attachment.id).order_by(Attachment.id).all()
    assert len(queue.read_attachments(message.id, 2)) == 2
    with pytest.raises(queue.Damaged, match="2 of the message's 3 attachments"):
        queue.read_attachments(message.id, 3)
    db.session.execute(delete(Attachment).where(Attachment.id == second.id))
    db.session.execute(delete(AttachmentChunk).filter_by(attachment_id=first.id, seq=1))
    db.session.commit()
    with pytest.raises(queue.Damaged, match=f"holds {CHUNK_BYTES} of its {len(big)} bytes"):
        queue.read_attachments(message.id)


def test_timestamps_keep_microseconds(app, make_message):
    moment = datetime(2026, 3, 4, 5, 6, 7, 123456)
    message = make_message(now=moment)
    assert fresh(message.id).created_at == moment


@pytest.mark.parametrize("db_kind", ["sqlite"])  # the ids are made without the database
def test_message_ids_stay_apart_when_the_program_seeds_random(app):
    # Test tools and some programs seed the random module; make_msgid draws from it.
    draft = make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text="hi")
    ids = set()
    for _ in range(3):
        random.seed(7)
        ids.add(store.message_row(draft, utcnow())["message_id"])
    assert len(ids) == 3


def test_a_message_without_attachments_is_one_statement_that_commits_itself(
    app, db_kind, monkeypatch
):  # type: ignore[no-untyped-def]
    calls: list[str] = []
    draft = make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text="hi")
    queue.enqueue(draft, source="test", max_attempts=3)  # the first connection is set up

    def executed(conn, cursor, statement, *args):  # type: ignore[no-untyped-def]
        calls.append(statement.split()[0])

    # On a server, what the driver is asked: every statement (the INSERT goes to it
    # straight, past SQLAlchemy's events: queue.direct), and its own COMMIT and ROLLBACK.
    if db_kind != "sqlite":
        driver = db.engine.dialect.loaded_dbapi.connect.__module__.split(".")[0]
        connection = pymysql.connections.Connection if driver == "pymysql" else psycopg.Connection
        cursor = pymysql.cursors.Cursor if driver == "pymysql" else psycopg.Cursor
        for kind, name in ((connection, "commit"), (connection, "rollback"), (cursor, "execute")):
            original = getattr(kind, name)

            def spy(self, *args, _name=name, _original=original, **kwargs):  # type: ignore[no-untyped-def]
                calls.append(args[0].split()[0] if _name == "execute" else _name.upper())
                return _original(self, *args, **kwargs)

            monkeypatch.setattr(kind, name, spy)
    engines = list(db.engines.values()) if db_kind == "sqlite" else []
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", executed)
    try:
        message, created = queue.enqueue(draft, source="test", max_attempts=3)
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", executed)
    assert created
    # On a database server the INSERT commits itself: one round trip, nothing after it
    # (on PostgreSQL the statement also wakes the workers: WITH new AS (INSERT ...) ...).
    one = ["WITH"] if db_kind == "postgres" else ["INSERT"]
    assert calls == one if db_kind != "sqlite" else calls[:1] == ["INSERT"], calls
    db.session.rollback()  # nothing of the request's session can take it back
    assert fresh(message.id).message_id == message.message_id


def test_a_move_the_table_does_not_allow_is_refused_before_it_is_sent():
    with pytest.raises(ValueError, match="status.MOVES"):
        moves.guarded(Status.SENT, Status.QUEUED)
    with pytest.raises(ValueError, match="status.MOVES"):
        moves.guarded((Status.FAILED, Status.QUEUED), Status.QUEUED)  # failed may, queued may not
    with pytest.raises(ValueError):
        moves.guarded(Status.SENDING, (Status.QUEUED, Status.SENT))  # several need the chooser
    with pytest.raises(ValueError):
        moves.guarded(Status.DEFERRED, None, status="queued")
    with pytest.raises(ValueError):
        moves.guarded(Status.DEFERRED, Status.SENDING, status="sending")


def test_every_move_in_the_table_makes_a_statement_that_names_the_old_status():
    for old, targets in MOVES.items():
        for new in targets:
            where = str(moves.guarded(old, new).whereclause)
            # retention: a message whose bodies were dropped is not queued again.
            dropped = new is Status.QUEUED and old in moves.SETTLED
            extra = " AND messages.bodies_dropped_at IS NULL" if dropped else ""
            assert where == "messages.status = :status_1" + extra, (old, new, where)


def test_no_module_but_moves_writes_the_messages_table():
    """Every UPDATE of messages is made by moves.guarded: no other update() of it in outbox."""
    root = Path(outbox.__file__).parent
    writers = []
    for path in root.rglob("*.py"):
        if "migrations" in path.parts or path == root / "queue" / "moves.py":
            continue
        text = path.read_text()
        if re.search(r"\bupdate\((Message|MESSAGES|messages)\b", text):
            writers.append(path.name)
    assert writers == []
