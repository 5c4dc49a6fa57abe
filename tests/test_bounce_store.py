"""Applying bounce mails to their messages: partly delivered, in flight, audit, retention."""

from datetime import timedelta

import pytest
from sqlalchemy import select

from outbox import retention
from outbox.bounces import store
from outbox.extensions import db
from outbox.models import AuditEvent, BounceMail, utcnow
from outbox.status import Status
from outbox.worker import Worker

from . import bouncemail
from .test_queue import fresh
from .test_recipients import states
from .test_worker import store as write

BOUNCES = "bounces@example.com"
A, B = "a@example.com", "b@example.com"


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
def test_a_message_being_sent_again_is_not_written_and_the_bounce_says_so(
    smtp_app, smtp, make_message
):
    smtp.recorder.rcpt_replies[B] = "451 4.3.0 try again later"
    message, paths = verp_sent(smtp_app, smtp, make_message, [A, B])
    write(message.id, Status.DEFERRED, status=Status.SENDING.value, locked_by="w")
    before = fresh(message.id).recipients
    pk = store.take_in(
        bouncemail.postfix(paths[A], A, message.message_id), "smtp", None, [paths[A]]
    )
    assert fresh(message.id).recipients == before  # unchanged: the worker owns the column now
    mail = db.session.get(BounceMail, pk)
    assert (mail.kind, mail.message_pk) == ("hard", message.id)
    assert "being sent again" in (mail.note or "")


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
