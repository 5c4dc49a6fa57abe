"""Complaints taken in as bounces are: over SMTP by `outbox bounces --listen`, and from Dovecot."""

import smtplib

import pytest
from sqlalchemy import select

from outbox.capabilities import suppression
from outbox.capabilities.bounces import imap
from outbox.core.status import Status
from outbox.models import BounceMail
from outbox.models.db import db
from outbox.worker import Worker
from tests.support import complaintmail
from tests.support.bouncemail import BOUNCES
from tests.support.rows import fresh, states

FORMATS = {"yahoo": complaintmail.yahoo, "jmrp": complaintmail.jmrp,
           "headers": complaintmail.headers_only}  # fmt: skip


def sent(app, smtp, make_message, addresses):  # type: ignore[no-untyped-def]
    """Messages sent with VERP on, one per address, each to it and a colleague: each
    message and the address's return path."""
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    messages = [make_message(to=[address, f"other.{address}"]) for address in addresses]
    Worker().drain()
    paths = {(m.message_id, m.rcpt_tos[0]): m.mail_from for m in smtp.received}
    return [(m, paths[(m.message_id, a)]) for m, a in zip(messages, addresses, strict=True)]


def reports(sent_to, addresses):  # type: ignore[no-untyped-def]
    """One complaint of each provider's format, to the bounce address given to its loop."""
    made = []
    for build, address, (message, path) in zip(FORMATS.values(), addresses, sent_to, strict=True):
        if build is complaintmail.jmrp:
            made.append(build(BOUNCES, path, message.message_id))  # the recipient redacted
        else:
            made.append(build(BOUNCES, path, address, message.message_id))
    return made


def complained(sent_to, addresses, via: str) -> None:  # type: ignore[no-untyped-def]
    """Each complaint marked its recipient alone, suppressed it, and is kept as matched."""
    for address, (message, _) in zip(addresses, sent_to, strict=True):
        row = fresh(message.id)
        assert row.status == Status.SENT
        assert states(row)[address][0] == "complained"
        assert states(row)[f"other.{address}"][0] == "sent"
    db.session.expire_all()
    found = list(db.session.scalars(select(BounceMail).order_by(BounceMail.id)))
    want = [("complaint", via, "verp", message.id) for message, _ in sent_to]
    assert [(m.kind, m.via, m.matched_by, m.message_pk) for m in found] == want
    listed = suppression.matching(addresses)
    assert sorted(e.key for e in listed.values()) == sorted(addresses)
    assert {e.source for e in listed.values()} == {"complaint"}


@pytest.mark.all_databases
def test_complaints_over_smtp_mark_their_recipients_complained(
    smtp_app, smtp, make_message, listener
):
    addresses = [f"{name}@example.org" for name in FORMATS]
    sent_to = sent(smtp_app, smtp, make_message, addresses)
    for raw in reports(sent_to, addresses):
        with smtplib.SMTP("127.0.0.1", listener, timeout=10) as client:
            client.sendmail("feedback@arf.example.net", [BOUNCES], raw)  # not the null sender
    complained(sent_to, addresses, "smtp")


@pytest.mark.all_databases
def test_complaints_from_the_mailbox_mark_their_recipients_complained(
    smtp_app, smtp, make_message, dovecot
):
    smtp_app.config.update(BOUNCE_IMAP_URL=dovecot.url(), BOUNCE_IMAP_CA_FILE=str(dovecot.ca_file))
    addresses = [f"{name}@example.org" for name in FORMATS]
    sent_to = sent(smtp_app, smtp, make_message, addresses)
    dovecot.deliver(*reports(sent_to, addresses))
    assert imap.poll_if_due("w1") == len(FORMATS)
    complained(sent_to, addresses, "imap")
