"""The worker against a real SMTP server: batches, retries, refusals, stops and lost claims."""

import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from outbox import queue
from outbox.core.status import Status
from outbox.models import Attempt, Message, utcnow
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support.rows import attempts_of, fresh, make_due, store
from tests.support.smtpd import SilentServer, free_port


def point_at(app, port: int) -> None:  # type: ignore[no-untyped-def]
    app.config["MAIL_PORT"] = app.extensions["mail"].port = port


@pytest.mark.all_databases
def test_a_drain_sends_each_due_message_once_over_one_connection_a_pass(
    smtp_app, smtp, make_message
):
    smtp_app.config["BATCH_SIZE"] = 2
    due = [make_message() for _ in range(5)]
    later = make_message(send_after=utcnow() + timedelta(hours=1))
    before = utcnow()
    assert Worker().drain() == Tally(sent=5)
    assert sorted(smtp.recorder.message_ids()) == sorted(m.message_id for m in due)
    assert smtp.recorder.connections == 1  # kept open from batch to batch
    for message in due:
        row = fresh(message.id)
        assert (row.status, row.attempts, row.locked_by) == (Status.SENT, 1, None)
        assert before <= row.sent_at <= utcnow()
        (attempt,) = attempts_of(message.id)
        assert (attempt.outcome, attempt.smtp_code, attempt.error) == ("sent", 250, None)
        assert attempt.reply == "OK queued"  # the server's words at the final dot
    assert fresh(later.id).status == Status.QUEUED
    assert Worker().drain() == Tally()
    assert len(smtp.received) == 5


def recorded_as_each_arrives(smtp) -> list[int]:  # type: ignore[no-untyped-def]
    """How many messages were marked sent as each message's data reached the server."""
    engine, seen = db.engine, []
    sent = select(func.count()).select_from(Message).where(Message.status == Status.SENT.value)

    def look() -> None:
        with engine.connect() as connection:
            seen.append(connection.execute(sent).scalar_one())

    smtp.recorder.on_data = look
    return seen


@pytest.mark.all_databases
def test_outcomes_are_written_every_record_every_messages(smtp_app, smtp, make_message):
    # What a worker killed at any moment would send again: the outcomes not yet written.
    smtp_app.config.update(BATCH_SIZE=10, RECORD_EVERY=4, RECORD_AFTER=60.0)
    for _ in range(10):
        make_message()
    seen = recorded_as_each_arrives(smtp)
    assert Worker().drain() == Tally(sent=10)
    assert seen == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]
    assert len(db.session.query(Attempt).filter_by(outcome="sent").all()) == 10


def test_an_outcome_waits_at_most_record_after(smtp_app, smtp, make_message):
    smtp_app.config.update(BATCH_SIZE=10, RECORD_EVERY=100, RECORD_AFTER=0.2)
    smtp.recorder.delay = 0.1  # so three sends take longer than RECORD_AFTER
    for _ in range(6):
        make_message()
    seen = recorded_as_each_arrives(smtp)
    assert Worker().drain() == Tally(sent=6)
    assert seen[0] == 0 and seen[4] >= 3, seen


@pytest.mark.all_databases
def test_a_group_of_mixed_outcomes_is_written_each_as_it_came(smtp_app, smtp, make_message):
    smtp_app.config.update(BATCH_SIZE=10, RECORD_EVERY=10, MAX_ATTEMPTS=3)
    replies = ["451 4.3.0 busy", "250 ok", "550 5.1.1 no such user", "250 ok", "452 4.2.2 full"]
    smtp.recorder.data_replies.extend(replies)
    messages = [make_message() for _ in range(4)]
    last = make_message()
    store(last.id, Status.QUEUED, attempts=2)  # its deferral is its last attempt
    assert Worker().drain() == Tally(sent=2, deferred=1, failed=2)
    rows = [fresh(m.id) for m in [*messages, last]]
    assert [r.status for r in rows] == ["deferred", "sent", "failed", "sent", "failed"]
    assert [r.attempts for r in rows] == [1, 1, 1, 1, 3]
    assert rows[0].next_attempt_at == rows[0].last_retry + timedelta(seconds=60)
    assert rows[1].sent_at == rows[1].last_retry and rows[3].sent_at > rows[1].sent_at
    assert rows[4].last_error == "452 4.2.2 full (gave up after 3 attempts)"
    outcomes = [[(a.outcome, a.smtp_code) for a in attempts_of(r.id)] for r in rows]
    assert outcomes == [
        [("deferred", 451)], [("sent", 250)], [("failed", 550)], [("sent", 250)],
        [("failed", 452)],
    ]  # fmt: skip
    assert all(r.locked_by is None and r.locked_at is None for r in rows)


def test_a_retry_sends_the_same_message_id(smtp_app, smtp, make_message):
    smtp.recorder.data_replies.append("451 4.3.0 try again later")
    message = make_message()
    before = utcnow()
    assert Worker().drain() == Tally(deferred=1)
    row = fresh(message.id)
    assert (row.status, row.attempts, row.locked_by) == (Status.DEFERRED, 1, None)
    assert before <= row.last_retry <= utcnow()
    assert row.next_attempt_at == row.last_retry + timedelta(seconds=60)
    (attempt,) = attempts_of(message.id)
    assert (attempt.outcome, attempt.smtp_code) == ("deferred", 451)
    assert attempt.error == row.last_error == "451 4.3.0 try again later"
    assert Worker().drain() == Tally()  # not due yet

    make_due(message.id)
    assert Worker().drain() == Tally(sent=1)
    ((refused,), (sent,)) = smtp.recorder.refused, smtp.received
    assert refused.message_id == sent.message_id == row.message_id
    assert [a.outcome for a in attempts_of(message.id)] == ["deferred", "sent"]
    row = fresh(message.id)
    assert (row.status, row.attempts) == (Status.SENT, 2)


def test_deferrals_back_off_then_fail_when_attempts_run_out(smtp_app, smtp, make_message):
    smtp_app.config.update(RETRY_DELAY=10, RETRY_BACKOFF=3, RETRY_MAX_DELAY=100)
    smtp.recorder.data_reply = "451 4.3.0 try again later"
    message = make_message(max_attempts=5)
    waits = []
    for _ in range(4):
        assert Worker().drain() == Tally(deferred=1)
        row = fresh(message.id)
        waits.append((row.next_attempt_at - row.last_retry).total_seconds())
        make_due(message.id)
    assert waits == [10, 30, 90, 100]
    assert Worker().drain() == Tally(failed=1)
    row = fresh(message.id)
    assert (row.status, row.attempts) == (Status.FAILED, 5)
    assert row.last_error == "451 4.3.0 try again later (gave up after 5 attempts)"
    assert [a.outcome for a in attempts_of(message.id)] == ["deferred"] * 4 + ["failed"]
    assert [r.message_id for r in smtp.recorder.refused] == [row.message_id] * 5


def test_a_550_to_data_fails_at_once_and_is_never_retried(smtp_app, smtp, make_message):
    smtp_app.config["RETRY_DELAY"] = 0  # a deferral would be due again at once
    smtp.recorder.data_replies.append("550 5.7.1 message refused")
    message = make_message()
    assert Worker().drain() == Tally(failed=1)
    assert Worker().drain() == Tally()
    row = fresh(message.id)
    assert (row.status, row.attempts, row.last_error) == (
        Status.FAILED, 1, "550 5.7.1 message refused",
    )  # fmt: skip
    (attempt,) = attempts_of(message.id)
    assert (attempt.outcome, attempt.smtp_code) == ("failed", 550)
    assert (len(smtp.recorder.refused), smtp.received) == (1, [])


def test_a_refused_recipient_is_noted_and_the_others_get_the_message(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.1.1 no such user"
    message = make_message(to=["rcpt@example.com", "gone@example.com"])
    assert Worker().drain() == Tally(sent=1)
    (received,) = smtp.received
    assert received.rcpt_tos == ["rcpt@example.com"]
    row = fresh(message.id)
    assert row.status == Status.SENT
    assert "gone@example.com: 550 5.1.1 no such user" in row.last_error
    (attempt,) = attempts_of(message.id)
    assert (attempt.outcome, attempt.error) == ("sent", row.last_error)
    assert attempt.reply == "OK queued"


@pytest.mark.all_databases
def test_a_long_accepting_reply_is_kept_cut_and_a_refusal_keeps_none(smtp_app, smtp, make_message):
    smtp.recorder.data_replies.extend(["250 2.0.0 queued as " + "Q" * 400, "554 5.7.1 spam"])
    taken, refused = make_message(), make_message()
    assert Worker().drain() == Tally(sent=1, failed=1)
    (attempt,) = attempts_of(taken.id)
    assert attempt.reply == ("2.0.0 queued as " + "Q" * 400)[:255]
    (attempt,) = attempts_of(refused.id)
    assert (attempt.outcome, attempt.smtp_code, attempt.reply) == ("failed", 554, None)


def test_an_unreachable_server_defers_every_claimed_message(app, make_message):
    point_at(app, free_port())
    messages = [make_message() for _ in range(3)]
    tally = Worker().drain()
    assert (tally.deferred, tally.sent, tally.failed) == (3, 0, 0)
    where = f"{app.config['MAIL_SERVER']}:{app.config['MAIL_PORT']}"
    assert tally.fault == f"cannot connect to {where}: Connection refused"  # smtp.open_host
    for message in messages:
        row = fresh(message.id)
        # The server's fault, not the message's: counted, but none of its allowance spent.
        assert (row.status, row.attempts, row.locked_by) == (Status.DEFERRED, 1, None)
        assert row.max_attempts == app.config["MAX_ATTEMPTS"] + 1
        assert row.last_error == tally.fault
        (attempt,) = attempts_of(message.id)
        assert (attempt.outcome, attempt.smtp_code) == ("deferred", None)


def test_a_silent_server_times_out_and_leaves_no_claim(app, make_message):
    app.config.update(SMTP_TIMEOUT=1.0, LOCK_TIMEOUT=4.0)
    messages = [make_message(), make_message()]
    with SilentServer() as silent:
        point_at(app, silent.port)
        started = time.monotonic()
        tally = Worker().drain()
        elapsed = time.monotonic() - started
    assert (tally.deferred, tally.sent, tally.failed) == (2, 0, 0)
    # A server that never greets is the server's fault: the first message meets it, and
    # the rest of the batch is deferred with it, not tried against the same silence.
    assert 1 <= elapsed < 2
    assert len(silent.accepted) == 1
    for message in messages:
        row = fresh(message.id)
        assert (row.status, row.locked_by, row.locked_at) == (Status.DEFERRED, None, None)
        assert "timed out" in row.last_error


@pytest.mark.all_databases
@pytest.mark.parametrize(
    ("column", "value", "error"),
    [
        ("headers", ["X-Campaign", "spring"], "cannot build message: ValueError"),
        ("headers", {"X-Count": 5}, "the value of the header X-Count is not text"),
        ("from_addr", "", "no sender address"),
        ("recipients", [], "no recipient address"),
    ],
)
def test_a_poison_message_fails_alone_and_its_batch_goes_out(
    smtp_app, smtp, make_message, column, value, error
):
    first, poison, last = make_message(), make_message(), make_message()
    store(poison.id, Status.QUEUED, **{column: value})
    assert Worker().drain() == Tally(sent=2, failed=1)
    row = fresh(poison.id)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert error in row.last_error
    (attempt,) = attempts_of(poison.id)
    assert (attempt.outcome, attempt.error) == ("failed", row.last_error)
    assert smtp.recorder.message_ids() == [first.message_id, last.message_id]
    assert smtp.recorder.connections == 1


def test_a_stop_during_a_batch_hands_back_the_messages_not_started(smtp_app, smtp, make_message):
    worker = Worker()
    smtp.recorder.on_data = worker.stop.set
    messages = [make_message() for _ in range(4)]
    assert worker.drain() == Tally(sent=1, released=3)
    # The second mail's MAIL, RCPT and DATA went out with the first one's end; the
    # stop closed the connection before its content, so the server never took it.
    assert smtp.recorder.message_ids() == [messages[0].message_id]
    assert fresh(messages[0].id).status == Status.SENT
    for message in messages[1:]:
        row = fresh(message.id)
        assert (row.status, row.attempts, row.locked_by) == (Status.QUEUED, 0, None)
        assert attempts_of(message.id) == []


def test_a_stop_before_a_batch_hands_all_of_it_back(smtp_app, smtp, make_message):
    messages = [make_message() for _ in range(3)]
    worker = Worker()
    claims = queue.claim_batch(worker.worker_id, 10)
    worker.stop.set()
    assert worker.send_batch(claims) == Tally(released=3)
    assert worker.drain() == Tally()
    for message in messages:
        assert (fresh(message.id).status, attempts_of(message.id)) == (Status.QUEUED, [])
    assert (smtp.recorder.connections, smtp.received) == (0, [])


@pytest.mark.all_databases
def test_a_dead_workers_claim_is_taken_back_and_delivered(smtp_app, smtp, make_message):
    old = utcnow() - timedelta(seconds=smtp_app.config["LOCK_TIMEOUT"] + 60)
    abandoned = make_message(now=old)
    queue.claim_batch("dead-worker", 10, now=old)
    busy = make_message()
    queue.claim_batch("live-worker", 10)
    worker = Worker()
    assert worker.drain() == Tally(sent=1, reclaimed=1)
    row = fresh(abandoned.id)
    assert (row.status, row.attempts, row.locked_by) == (Status.SENT, 2, None)
    lost, sent = attempts_of(abandoned.id)
    assert (lost.outcome, lost.worker_id) == ("worker lost", "dead-worker")
    assert lost.error.startswith("worker lost: claim by dead-worker expired")
    assert (sent.outcome, sent.worker_id) == ("sent", worker.worker_id)
    assert smtp.recorder.message_ids() == [row.message_id]
    row = fresh(busy.id)
    assert (row.status, row.locked_by) == (Status.SENDING, "live-worker")


def test_a_claim_that_expires_during_a_long_pass_is_taken_back_in_that_pass(
    smtp_app, smtp, make_message
):
    # Timeouts with room for a slow machine's stalls: a reply late by more than
    # SMTP_TIMEOUT would defer a message and change the tally.
    smtp_app.config.update(SMTP_TIMEOUT=1.0, LOCK_TIMEOUT=4.0, BATCH_SIZE=5)
    smtp.recorder.delay = 0.05  # 80 messages: a pass of 4s
    backlog = [make_message() for _ in range(80)]
    abandoned = make_message(now=utcnow() - timedelta(seconds=10))
    # Claimed 3s ago: still held when the pass starts, expired a second into it, and
    # looked for again LOCK_TIMEOUT / 2 into it.
    queue.claim_batch("dead-worker", 1, now=utcnow() - timedelta(seconds=3))
    assert Worker().drain() == Tally(sent=81, reclaimed=1)
    row = fresh(abandoned.id)
    assert (row.status, row.attempts) == (Status.SENT, 2)
    assert [a.outcome for a in attempts_of(abandoned.id)] == ["worker lost", "sent"]
    assert smtp.recorder.message_ids()[-1] == row.message_id
    assert len(smtp.received) == len(backlog) + 1


def test_a_send_that_would_outlast_its_claim_is_cut_off_and_deferred(smtp_app, smtp, make_message):
    # Every reply comes well inside SMTP_TIMEOUT and LOCK_TIMEOUT is the 4 x
    # SMTP_TIMEOUT config.check asks for, but eight slow RCPTs (6 s) would outlast the
    # claim (4 s): the worker cuts the send off at LOCK_TIMEOUT / 2 (2 s) instead, and so
    # ends inside the claim with 2 s to spare for a busy machine.
    smtp_app.config.update(SMTP_TIMEOUT=1.0, LOCK_TIMEOUT=4.0)
    smtp.recorder.rcpt_delay = 0.75
    message = make_message(to=[f"r{n}@example.com" for n in range(8)])
    started = time.monotonic()
    tally = Worker().drain()
    assert time.monotonic() - started < 4.0
    assert (tally.deferred, tally.lost) == (1, 0)
    row = fresh(message.id)
    assert (row.status, row.attempts, row.locked_by) == (Status.DEFERRED, 1, None)
    assert "longer than 2s" in row.last_error
    assert smtp.received == []
    # Once the claim would have run out, there is nothing left for the sweep to take back.
    later = utcnow() + timedelta(seconds=4.1)
    assert queue.release_stale(smtp_app.config["LOCK_TIMEOUT"], now=later) == 0


def test_send_queued_prints_what_happened(smtp_app, smtp, runner, make_message):
    smtp.recorder.rcpt_replies.update(
        {"later@example.com": "451 4.2.1 try later", "gone@example.com": "550 5.1.1 no such user"}
    )
    for to in ("a@example.com", "b@example.com", "later@example.com", "gone@example.com"):
        make_message(to=[to])
    result = runner.invoke(args=["send-queued"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "sent 2, deferred 1, failed 1\n"
    assert len(smtp.received) == 2
