"""Applying bounce mails to their messages: partly delivered, in flight, early, audit, retention."""

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from outbox import queue, retention, suppression
from outbox.bounces import store, verp
from outbox.extensions import db
from outbox.models import AuditEvent, BounceMail, WebhookDelivery, utcnow
from outbox.status import Retry, Status
from outbox.webhooks import endpoints
from outbox.worker import Worker

from . import bouncemail, outcomes
from .test_queue import fresh
from .test_recipients import states
from .test_worker import store as write

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
