"""Applying complaints to their messages: matched by VERP, Message-ID or Feedback-ID, early."""

import json
from email import message_from_bytes

import pytest
from sqlalchemy import select

from outbox import queue
from outbox.capabilities import suppression
from outbox.capabilities.bounces import store, verp
from outbox.capabilities.webhooks import endpoints
from outbox.core.status import Status
from outbox.mail import feedback_id
from outbox.models import AuditEvent, BounceMail, WebhookDelivery, utcnow
from outbox.models.db import db
from outbox.worker import Worker
from tests.support import bouncemail, complaintmail, outcomes
from tests.support.rows import fresh, states
from tests.support.rows import store as write

BOUNCES = "bounces@example.com"
FBL = "fbl@example.com"  # the address given to the providers' feedback loops
A, B = "a@example.com", "b@example.com"
SENDER = "outbox@example.com"


def verp_sent(app, smtp, make_message, to):  # type: ignore[no-untyped-def]
    """A message sent with VERP on, and each recipient's return path."""
    app.config.update(BOUNCE_ADDRESS=BOUNCES, WEBHOOK_ALLOW_PRIVATE=True)
    endpoints.add("http://127.0.0.1:9/hook", "recipient.complained")
    message = make_message(to=to)
    Worker().drain()
    return message, {mail.rcpt_tos[0]: mail.mail_from for mail in smtp.received}


def told(message_pk: int) -> list[tuple[str, str]]:
    """The recipient and text of the recipient.complained events queued for a message."""
    db.session.expire_all()
    payloads = db.session.scalars(
        select(WebhookDelivery.payload).where(WebhookDelivery.kind == "recipient.complained")
    )
    found = [json.loads(payload)["data"] for payload in payloads]
    return [(data["recipient"], data["text"]) for data in found if data["id"] == message_pk]


def mail_of(pk: int) -> BounceMail:
    db.session.expire_all()
    return db.session.get(BounceMail, pk)


@pytest.mark.all_databases
def test_a_complaint_marks_its_recipient_suppresses_it_and_tells_the_webhooks(
    smtp_app, smtp, make_message
):
    message, paths = verp_sent(smtp_app, smtp, make_message, [A, B])
    raw = complaintmail.yahoo(FBL, paths[A], A, message.message_id)
    pk = store.take_in(raw, "imap")  # to the feedback loop's address, not a return path
    row = fresh(message.id)
    assert row.status == Status.SENT
    assert states(row)[A][0] == "complained" and states(row)[B][0] == "sent"
    said = "abuse report from Yahoo!-Mail-Feedback/2.0"
    assert row.recipients[0].reply == said
    mail = mail_of(pk)
    assert (mail.kind, mail.message_pk, mail.matched_by) == ("complaint", message.id, "verp")
    assert (mail.recipient, mail.status, mail.waiting) == (A, "abuse", False)
    (entry,) = suppression.matching([A, B]).values()
    assert (entry.source, entry.message_pk, entry.bounce_pk) == ("complaint", message.id, pk)
    assert suppression.find(A).created_by == "outbox (complaint)"
    assert told(message.id) == [(A, said)]
    (event,) = db.session.scalars(select(AuditEvent).where(AuditEvent.action == "complaint"))
    assert event.message_pk == message.id and f"complained: {A}" in (event.detail or "")


@pytest.mark.all_databases
def test_a_redacted_complaint_is_matched_to_its_recipient_by_the_return_path_it_names(
    smtp_app, smtp, make_message
):
    message, paths = verp_sent(smtp_app, smtp, make_message, [A, B])
    pk = store.take_in(complaintmail.jmrp(FBL, paths[B], message.message_id), "smtp", None, [FBL])
    assert states(fresh(message.id))[B][0] == "complained"
    assert states(fresh(message.id))[A][0] == "sent"
    assert mail_of(pk).matched_by == "verp" and told(message.id)[0][0] == B


@pytest.mark.all_databases
def test_without_verp_a_complaint_is_matched_by_message_id_then_feedback_id(
    smtp_app, smtp, make_message
):
    message = make_message(to=[A, B])
    Worker().drain()
    (sent,) = smtp.received
    fbid = message_from_bytes(sent.content)["Feedback-ID"]
    assert fbid == feedback_id.value(message.id, None, "transactional")
    by_id = store.take_in(complaintmail.headers_only(FBL, SENDER, B, message.message_id), "imap")
    assert mail_of(by_id).matched_by == "message-id"
    assert states(fresh(message.id))[B][0] == "complained"
    # A provider that rewrote the Message-ID: the Feedback-ID still names the message.
    raw = complaintmail.yahoo(FBL, SENDER, A, "<rewritten@isp.example.net>", fbid)
    by_fbid = store.take_in(raw, "imap")
    assert (mail_of(by_fbid).matched_by, mail_of(by_fbid).message_pk) == ("feedback-id", message.id)
    assert [state for state, _, _ in states(fresh(message.id)).values()] == ["complained"] * 2


@pytest.mark.all_databases
def test_a_mailings_feedback_id_finds_the_recipients_own_message(smtp_app, smtp, make_message):
    ours, other = make_message(to=[A]), make_message(to=[B])
    Worker().drain()
    for message in (ours, other):
        write(message.id, Status.SENT, mailing_id=7)
    fbid = feedback_id.value(ours.id, 7, "broadcast")
    raw = complaintmail.headers_only(FBL, SENDER, B, "<unknown@isp.example.net>", fbid)
    pk = store.take_in(raw, "imap")
    assert (mail_of(pk).matched_by, mail_of(pk).message_pk) == ("feedback-id", other.id)
    assert states(fresh(other.id))[B][0] == "complained" and states(fresh(ours.id))[A][0] == "sent"
    redacted = complaintmail.headers_only(FBL, SENDER, None, "<unknown2@isp.example.net>", fbid)
    assert mail_of(store.take_in(redacted, "imap")).message_pk is None  # whose, it cannot say


def test_with_verp_on_a_message_id_alone_marks_nobody(smtp_app, smtp, make_message):
    message, _ = verp_sent(smtp_app, smtp, make_message, [A, B])
    pk = store.take_in(complaintmail.headers_only(FBL, SENDER, A, message.message_id), "imap")
    mail = mail_of(pk)
    assert (mail.message_pk, mail.matched_by) == (message.id, "message-id")
    assert "Message-ID alone" in (mail.note or "")
    assert states(fresh(message.id))[A][0] == "sent" and suppression.matching([A]) == {}


def test_a_redacted_complaint_of_a_message_to_several_names_nobody(smtp_app, smtp, make_message):
    message = make_message(to=[A, B])
    Worker().drain()
    pk = store.take_in(complaintmail.jmrp(FBL, SENDER, message.message_id), "imap")
    assert mail_of(pk).note == store.UNNAMED and mail_of(pk).message_pk == message.id
    assert {state for state, _, _ in states(fresh(message.id)).values()} == {"sent"}
    one = make_message(to=[A])  # to one recipient, a redacted complaint can only be hers
    Worker().drain()
    store.take_in(complaintmail.jmrp(FBL, SENDER, one.message_id), "imap")
    assert states(fresh(one.id))[A][0] == "complained"


def test_a_complaint_marks_only_a_sent_recipient(smtp_app, smtp, make_message):
    message, paths = verp_sent(smtp_app, smtp, make_message, [A, B])
    store.take_in(complaintmail.yahoo(FBL, paths[A], A, message.message_id), "imap")
    again = store.take_in(complaintmail.jmrp_legacy(FBL, paths[A], A, message.message_id), "imap")
    assert mail_of(again).note == store.NOT_SENT.format("complained")
    bounce = bouncemail.postfix(paths[B], B, message.message_id)
    store.take_in(bounce, "smtp", None, [paths[B]])
    late = store.take_in(complaintmail.yahoo(FBL, paths[B], B, message.message_id), "imap")
    assert mail_of(late).note == store.NOT_SENT.format("bounced")
    assert states(fresh(message.id))[B][0] == "bounced" and len(told(message.id)) == 1


@pytest.mark.all_databases
def test_a_complaint_before_the_send_is_recorded_is_applied_when_it_is(app, make_message):
    app.config.update(BOUNCE_ADDRESS=BOUNCES, WEBHOOK_ALLOW_PRIVATE=True)
    endpoints.add("http://127.0.0.1:9/hook", "recipient.complained")
    message = make_message(to=[A])
    (claim,) = queue.claim_batch("w1", 10)
    path = verp.address_for(BOUNCES, app.secret_key, message.id, 0)
    pk = store.take_in(complaintmail.yahoo(FBL, path, A, message.message_id), "imap")
    assert states(fresh(message.id))[A][0] == "pending"
    assert (mail_of(pk).waiting, mail_of(pk).note) == (True, store.WAITING)
    assert told(message.id) == [] and suppression.matching([A]) == {}
    assert outcomes.sent(claim, utcnow())
    assert states(fresh(message.id))[A][0] == "complained" and len(told(message.id)) == 1
    assert (mail_of(pk).waiting, mail_of(pk).note) == (False, store.APPLIED_LATE)
    (entry,) = suppression.matching([A]).values()
    assert entry.source == "complaint"
