"""Applying bounce mails to their messages: partly delivered, in flight, early, audit, retention."""

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import event, select, text

from outbox import queue
from outbox.capabilities import retention, suppression
from outbox.capabilities.bounces import store, verp
from outbox.capabilities.webhooks import endpoints
from outbox.core.status import Retry, Status
from outbox.models import AuditEvent, BounceMail, WebhookDelivery, utcnow
from outbox.models.db import db
from outbox.worker import Worker
from tests.support import bouncemail, outcomes
from tests.support.rows import fresh, states
from tests.support.rows import store as write

BOUNCES = "bounces@example.com"
A, B = "a@example.com", "b@example.com"
RETRY = Retry(60.0, 2.0, 3600.0)


def verp_sent(app, smtp, make_message, to):  # type: ignore[no-untyped-def]
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    message = make_message(to=to)
    Worker().drain()
    return message, {mail.rcpt_tos[0]: mail.mail_from for mail in smtp.received}


@pytest.mark.all_databases
def test_a_partly_delivered_message_has_its_delivered_recipient_marked(
    smtp_app, smtp, make_message
):
    smtp.recorder.rcpt_replies[B] = "451 4.3.0 try again later"
    message, paths = verp_sent(smtp_app, smtp, make_message, [A, B])
    assert fresh(message.id).status == Status.DEFERRED
    pk = store.take_in(bouncemail.gmail(paths[A], A, message.message_id), "smtp", None, [paths[A]])
    row = fresh(message.id)
    assert row.status == Status.DEFERRED  # still waiting for B; A bounced
    assert states(row)[A][0] == "bounced" and states(row)[B][0] == "deferred"
    (event,) = db.session.scalars(select(AuditEvent).where(AuditEvent.action == "bounce"))
    assert event.message_pk == message.id and f"#{pk}" in (event.detail or "")


@pytest.mark.all_databases
def test_a_bounce_for_a_message_being_sent_again_is_applied_when_its_outcome_is_recorded(
    smtp_app, smtp, make_message
):
    smtp.recorder.rcpt_replies[B] = "451 4.3.0 try again later"
    message, paths = verp_sent(smtp_app, smtp, make_message, [A, B])
    write(message.id, Status.DEFERRED, next_attempt_at=utcnow())
    (claim,) = queue.claim_batch("w1", 10)
    before = fresh(message.id).recipients
    pk = store.take_in(
        bouncemail.postfix(paths[A], A, message.message_id), "smtp", None, [paths[A]]
    )
    assert fresh(message.id).recipients == before  # unchanged: the worker owns the column now
    mail = db.session.get(BounceMail, pk)
    assert (mail.kind, mail.message_pk, mail.waiting) == ("hard", message.id, True)
    assert outcomes.deferred(claim, utcnow(), 451, "try again later", RETRY) is Status.DEFERRED
    assert (
        states(fresh(message.id))[A][0] == "bounced"
        and states(fresh(message.id))[B][0] == "deferred"
    )
    db.session.expire_all()
    assert not db.session.get(BounceMail, pk).waiting


@pytest.mark.all_databases
def test_without_verp_a_bounce_is_matched_by_the_returned_message_id(smtp_app, smtp, make_message):
    message = make_message(to=[A, B])  # no BOUNCE_ADDRESS: the mail goes from its sender
    Worker().drain()
    assert [m.mail_from for m in smtp.received] == ["outbox@example.com"]
    raw = bouncemail.exchange("outbox@example.com", B, message.message_id)
    pk = store.take_in(raw, "imap")  # as from the sender's mailbox over IMAP
    assert (
        states(fresh(message.id))[B][0] == "bounced" and states(fresh(message.id))[A][0] == "sent"
    )
    mail = db.session.get(BounceMail, pk)
    assert (mail.kind, mail.message_pk, mail.matched_by) == ("hard", message.id, "message-id")


def test_a_second_bounce_for_a_bounced_recipient_changes_nothing(smtp_app, smtp, make_message):
    message, paths = verp_sent(smtp_app, smtp, make_message, [A])
    store.take_in(bouncemail.postfix(paths[A], A, message.message_id), "smtp", None, [paths[A]])
    before = fresh(message.id).recipients
    second = store.take_in(
        bouncemail.exim(paths[A], A, message.message_id), "smtp", None, [paths[A]]
    )
    assert fresh(message.id).recipients == before
    assert "no recipient of the message was left" in (db.session.get(BounceMail, second).note or "")


def test_bounce_mails_go_with_the_retention_of_messages(app):
    old = store.take_in(bouncemail.stray("old@example.com"), "smtp")
    young = store.take_in(bouncemail.stray("young@example.com"), "smtp")
    db.session.get(BounceMail, old).received_at = utcnow() - timedelta(days=91)
    db.session.commit()
    retention.purge()
    db.session.expire_all()
    assert list(db.session.scalars(select(BounceMail.id))) == [young]


def early(app, make_message, to: str = A):  # type: ignore[no-untyped-def]
    """A message claimed by a worker, and its hard bounce taken in before the outcome is
    recorded, as a server that bounces at once makes it: the claim and the bounce mail."""
    app.config.update(BOUNCE_ADDRESS=BOUNCES, WEBHOOK_ALLOW_PRIVATE=True)
    endpoints.add("http://127.0.0.1:9/hook", "recipient.bounced")
    message = make_message(to=[to])
    (claim,) = queue.claim_batch("w1", 10)
    path = verp.address_for(BOUNCES, app.secret_key, message.id, 0)
    pk = store.take_in(bouncemail.postfix(path, to, message.message_id), "smtp", None, [path])
    assert states(fresh(message.id))[to][0] == "pending"
    mail = db.session.get(BounceMail, pk)
    assert (mail.kind, mail.message_pk, mail.waiting) == ("hard", message.id, True)
    assert mail.note == store.WAITING
    return claim, mail


def told(message_pk: int) -> list[str]:
    """The recipients of the recipient.bounced events queued for a message's webhooks."""
    db.session.expire_all()
    payloads = db.session.scalars(
        select(WebhookDelivery.payload).where(WebhookDelivery.kind == "recipient.bounced")
    )
    found = [json.loads(payload)["data"] for payload in payloads]
    return [data["recipient"] for data in found if data["id"] == message_pk]


@pytest.mark.all_databases
def test_a_bounce_before_the_send_is_recorded_is_applied_when_it_is(app, make_message):
    claim, mail = early(app, make_message)
    assert told(claim.id) == [] and suppression.matching([A]) == {}
    assert outcomes.sent(claim, utcnow())
    row = fresh(claim.id)
    assert row.status == Status.SENT and states(row)[A][0] == "bounced"
    (entry,) = row.recipients
    assert entry["dsn"] == "5.1.1" and entry["code"] == 550
    (suppressed,) = suppression.matching([A]).values()
    assert (suppressed.source, suppressed.message_pk, suppressed.bounce_pk) == (
        "bounce",
        claim.id,
        mail.id,
    )
    assert told(claim.id) == [A]
    mail = db.session.get(BounceMail, mail.id)
    assert not mail.waiting and mail.note == store.APPLIED_LATE
    (event,) = db.session.scalars(select(AuditEvent).where(AuditEvent.action == "bounce"))
    assert event.message_pk == claim.id and f"#{mail.id}" in (event.detail or "")


@pytest.mark.all_databases
def test_an_early_bounce_waits_while_its_recipient_is_deferred_and_applies_once_sent(
    app, make_message
):
    claim, mail = early(app, make_message)
    assert outcomes.deferred(claim, utcnow(), 451, "try again later", RETRY) is Status.DEFERRED
    assert states(fresh(claim.id))[A][0] == "deferred" and told(claim.id) == []
    assert db.session.get(BounceMail, mail.id).waiting
    (again,) = queue.claim_batch("w2", 10, utcnow() + timedelta(hours=2))
    assert outcomes.sent(again, utcnow())
    assert states(fresh(claim.id))[A][0] == "bounced" and told(claim.id) == [A]
    assert not db.session.get(BounceMail, mail.id).waiting


@pytest.mark.all_databases
def test_an_early_bounce_for_a_recipient_that_failed_is_left_as_on_time(app, make_message):
    claim, mail = early(app, make_message)
    assert outcomes.failed(claim, utcnow(), 550, "550 5.1.1 no such user")
    assert states(fresh(claim.id))[A][0] == "failed" and told(claim.id) == []
    mail = db.session.get(BounceMail, mail.id)
    assert not mail.waiting and mail.note == store.NONE_LEFT


SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb),
           pytest.param("postgres", marks=pytest.mark.postgres)]  # fmt: skip
# Sessions of the test's own database waiting on a row lock now. MariaDB's innodb_trx
# leaves out a FOR UPDATE that waits while the optimizer reads its row by the key
# ("Statistics"); a statement that locks rows, still running while another session
# holds them, is waiting.
LOCK_WAITS = {
    "mariadb": "SELECT count(*) FROM information_schema.processlist "
    "WHERE db = DATABASE() AND id <> CONNECTION_ID() AND command = 'Query' "
    "AND (info LIKE '%FOR UPDATE' OR info LIKE 'UPDATE %')",
    "postgres": "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'",
}


def in_thread(app, work: Callable[[], object], name: str) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Run work in a thread of its own, with its own app context and database connection."""

    def run() -> None:
        with app.app_context():
            work()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def blocked(db_kind: str, thread: threading.Thread) -> bool:
    """Wait until thread waits on a row lock (True) or has ended (False)."""
    deadline = time.monotonic() + 60
    with db.engine.connect() as connection:
        while time.monotonic() < deadline:
            if connection.execute(text(LOCK_WAITS[db_kind])).scalar_one():
                return True
            if not thread.is_alive():
                return False
            connection.rollback()  # a fresh look each time
            time.sleep(0.02)
    raise AssertionError("neither waiting on a lock nor done after 60 s")


@pytest.fixture
def racing(app, make_message) -> tuple[queue.Claim, bytes, str]:  # type: ignore[no-untyped-def]
    """A claimed message, its bounce and return path, and a webhook taking recipient.bounced."""
    app.config.update(BOUNCE_ADDRESS=BOUNCES, WEBHOOK_ALLOW_PRIVATE=True)
    endpoints.add("http://127.0.0.1:9/hook", "recipient.bounced")
    message = make_message(to=[A])
    (claim,) = queue.claim_batch("w1", 10)
    path = verp.address_for(BOUNCES, app.secret_key, message.id, 0)
    return claim, bouncemail.postfix(path, A, message.message_id), path


def applied_once(claim: queue.Claim) -> None:
    """The bounce marked its recipient, suppressed it and was told once; none waits."""
    assert states(fresh(claim.id))[A][0] == "bounced" and told(claim.id) == [A]
    assert suppression.matching([A])
    assert not any(db.session.scalars(select(BounceMail.waiting)))


@pytest.mark.parametrize("db_kind", SERVERS)
def test_a_bounce_taken_in_while_the_send_is_being_recorded_waits_for_the_commit(
    app, db_kind, racing
):
    claim, raw, path = racing
    recording, go = threading.Event(), threading.Event()

    def hold(statuses: object) -> None:  # the worker's UPDATE done, its commit not yet
        recording.set()
        assert go.wait(60)

    queue.on_recorded(app, hold)
    worker = in_thread(app, lambda: outcomes.sent(claim, utcnow()), "worker")
    try:
        assert recording.wait(60)
        bounce = in_thread(app, lambda: store.take_in(raw, "smtp", None, [path]), "bounce")
        assert blocked(db_kind, bounce)  # on the message's row, which the worker holds
    finally:
        go.set()
        worker.join(60)
    bounce.join(60)
    applied_once(claim)


@pytest.mark.parametrize("db_kind", SERVERS)
def test_a_send_recorded_while_an_early_bounce_is_being_kept_applies_it(app, db_kind, racing):
    claim, raw, path = racing
    locked, go = threading.Event(), threading.Event()

    def hold(conn, cursor, statement, *args: object) -> None:  # type: ignore[no-untyped-def]
        # The bounce has read the message under its lock and not yet committed.
        if threading.current_thread().name == "bounce" and "FOR UPDATE" in statement:
            locked.set()
            assert go.wait(60)

    event.listen(db.engine, "after_cursor_execute", hold)
    bounce = in_thread(app, lambda: store.take_in(raw, "smtp", None, [path]), "bounce")
    try:
        assert locked.wait(60)
        worker = in_thread(app, lambda: outcomes.sent(claim, utcnow()), "worker")
        assert blocked(db_kind, worker)  # its UPDATE waits for the bounce's commit
    finally:
        go.set()
        bounce.join(60)
        event.remove(db.engine, "after_cursor_execute", hold)
    worker.join(60)
    applied_once(claim)
