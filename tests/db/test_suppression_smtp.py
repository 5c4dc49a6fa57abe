"""Suppressing from what SMTP servers say: which refusals mean "no such user", and the worker's."""

import pytest
import sqlalchemy as sa

from outbox.capabilities import suppression
from outbox.core.status import Status
from outbox.models import Suppression
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.rows import fresh, make_due, states

A, B, C = "a@example.com", "b@example.com", "c@example.com"


@pytest.mark.parametrize(
    ("code", "text", "unknown"),
    [
        (550, "5.1.1 <x@example.com>: Recipient address rejected: User unknown", True),
        (550, "5.1.10 Recipient address has null MX", True),
        (550, "5.2.1 The email account that you tried to reach is disabled.", True),
        (553, "5.1.3 bad recipient address syntax", True),
        (550, "5.7.1 Message rejected as spam", False),
        (552, "5.2.2 Mailbox full", False),
        (554, "5.6.0 Content rejected", False),
        (550, "5.3.4 Message too big for system", False),
        (550, "User unknown", True),  # no enhanced code: the words say it
        (550, "No such user here", True),
        (550, "Requested action not taken: mailbox unavailable", False),
        (550, "5.7.1 User unknown in the block list", False),  # the code wins over words
        (551, "User unknown", False),  # only 550 without an enhanced code
        (450, "4.1.1 User unknown, try later", False),
        (None, "5.1.1 no such user", True),
    ],
)
def test_no_such_user_reads_the_enhanced_code_first(code, text, unknown):
    assert suppression.no_such_user(code, text) is unknown


@pytest.mark.all_databases
def test_a_no_such_user_refusal_suppresses_and_a_policy_refusal_does_not(
    smtp_app, smtp, make_message
):
    smtp.recorder.rcpt_replies[A] = "550 5.1.1 <a@example.com>: Recipient address rejected"
    smtp.recorder.rcpt_replies[B] = "550 5.7.1 <b@example.com>: Relay access denied"
    message = make_message(to=[A, B, C])
    Worker().drain()
    assert fresh(message.id).status == Status.SENT
    entries = db.session.scalars(sa.select(Suppression)).all()
    assert [(e.address, e.source, e.message_pk) for e in entries] == [(A, "smtp", message.id)]
    assert entries[0].reason == "550 5.1.1 <a@example.com>: Recipient address rejected"
    assert entries[0].created_by == "outbox (smtp)"
    # The next message to A leaves A out; B is tried again.
    smtp.recorder.rcpt_replies.clear()
    nxt = make_message(to=[A, B])
    Worker().drain()
    assert [mail.rcpt_tos for mail in smtp.received] == [[C], [B]]
    assert states(fresh(nxt.id))[A][0] == "suppressed"


@pytest.mark.all_databases
def test_a_single_recipient_refused_as_unknown_is_suppressed_once(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies[A] = "550 5.1.1 no such user"
    message = make_message(to=[A], max_attempts=3)
    Worker().drain()
    assert fresh(message.id).status == Status.FAILED
    assert suppression.find(A).message_pk == message.id
    # A deferral of another recipient, recorded again, adds nothing twice.
    smtp.recorder.rcpt_replies[B] = "451 4.3.0 later"
    other = make_message(to=[B, C])
    Worker().drain()
    make_due(other.id)
    Worker().drain()
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Suppression)) == 1
