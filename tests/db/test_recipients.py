"""Each recipient's own delivery against a real SMTP server: partial refusals, limits, retries."""

import pytest

from outbox import queue
from outbox.core.status import Status
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.rows import attempts_of, delivered, fresh, make_due, states

A, B, C = "a@example.com", "b@example.com", "c@example.com"


@pytest.mark.all_databases
def test_a_recipient_refused_for_now_is_tried_again_and_the_others_are_not(
    smtp_app, smtp, make_message
):
    smtp.recorder.rcpt_replies[B] = "451 4.3.0 try again later"
    message = make_message(to=[A, B], cc=[C])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.DEFERRED
    assert states(row) == {A: ("sent", None, 1), B: ("deferred", 451, 1), C: ("sent", None, 1)}
    assert (
        row.last_error
        == "delivered to 2 of 3 recipients; deferred: b@example.com: 451 4.3.0 try again later"
    )
    del smtp.recorder.rcpt_replies[B]
    make_due(message.id)
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.SENT
    assert states(row) == {A: ("sent", None, 1), B: ("sent", None, 2), C: ("sent", None, 1)}
    assert delivered(smtp) == {A: 1, B: 1, C: 1}
    assert [mail.rcpt_tos for mail in smtp.received] == [[A, C], [B]]
    assert [a.outcome for a in attempts_of(message.id)] == ["deferred", "sent"]


@pytest.mark.all_databases
def test_recipients_past_a_servers_limit_go_in_further_transactions(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_limit = 100
    everyone = [f"r{n:03}@example.com" for n in range(150)]
    message = make_message(to=everyone[:50], cc=everyone[50:120], bcc=everyone[120:])
    assert Worker().drain().sent == 1
    row = fresh(message.id)
    assert (row.status, row.last_error, row.attempts) == (Status.SENT, None, 1)
    # Every recipient took the message's own state: nothing per recipient was written.
    assert all(set(entry) == {"kind", "address"} for entry in row.recipients)
    assert {state for state, _, _ in states(row).values()} == {"sent"}
    # All 150 on one connection, in the order given, each once.
    assert [len(mail.rcpt_tos) for mail in smtp.received] == [100, 50]
    assert [r for mail in smtp.received for r in mail.rcpt_tos] == everyone
    assert smtp.recorder.connections == 1


def test_a_recipient_refused_for_good_fails_alone(smtp_app, smtp, make_message, client):
    smtp.recorder.rcpt_replies[B] = "550 5.1.1 no such user"
    message = make_message(to=[A, B, C])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.SENT
    assert states(row) == {A: ("sent", None, 1), B: ("failed", 550, 1), C: ("sent", None, 1)}
    assert (
        row.last_error
        == "delivered to 2 of 3 recipients; failed: b@example.com: 550 5.1.1 no such user"
    )
    assert delivered(smtp) == {A: 1, C: 1}


def test_552_to_a_recipient_is_taken_as_452(smtp_app, smtp, make_message):
    # RFC 5321 4.5.3.1.10: "552 too many recipients" is to be treated as temporary.
    smtp.recorder.rcpt_replies[B] = "552 5.5.3 too many recipients"
    message = make_message(to=[A, B])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.DEFERRED
    assert states(row)[B] == ("deferred", 552, 1)
    assert delivered(smtp) == {A: 1}


def test_every_recipient_refused_for_now_defers_the_message(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies.update({A: "450 4.2.0 busy", B: "451 4.3.0 later"})
    message = make_message(to=[A, B])
    Worker().drain()
    row = fresh(message.id)
    assert (row.status, row.attempts) == (Status.DEFERRED, 1)
    assert states(row) == {A: ("deferred", 450, 1), B: ("deferred", 451, 1)}
    assert smtp.received == []


def test_recipients_still_refused_after_the_last_attempt_are_given_up(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies[B] = "451 4.3.0 try again later"
    message = make_message(to=[A, B], max_attempts=2)
    Worker().drain()
    make_due(message.id)
    Worker().drain()
    row = fresh(message.id)
    # Delivered to one, so sent; the other failed, and says why.
    assert row.status == Status.SENT
    assert states(row) == {A: ("sent", None, 1), B: ("failed", 451, 2)}
    (entry,) = [e for e in row.recipients if e["address"] == B]
    assert entry["reply"] == "4.3.0 try again later (gave up after 2 attempts)"
    assert delivered(smtp) == {A: 1}


def test_a_failed_message_sent_again_goes_to_every_recipient(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies.update({A: "550 5.7.1 no", B: "550 5.7.1 no"})
    message = make_message(to=[A, B])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.FAILED
    assert states(row) == {A: ("failed", 550, 1), B: ("failed", 550, 1)}
    smtp.recorder.rcpt_replies.clear()
    queue.resend(message.id, 3)
    db.session.commit()
    Worker().drain()
    assert fresh(message.id).status == Status.SENT
    assert delivered(smtp) == {A: 1, B: 1}


def test_a_recipient_in_to_and_cc_is_sent_to_once(smtp_app, smtp, make_message):
    message = make_message(to=[A, B], cc=[B, "A@EXAMPLE.COM"], bcc=[A])
    Worker().drain()
    assert fresh(message.id).status == Status.SENT
    (mail,) = smtp.received
    # Local parts are case-sensitive (RFC 5321 2.4); the domain is stored in lower case.
    assert mail.rcpt_tos == [A, B, "A@example.com"]


def test_the_api_and_the_message_page_show_each_recipient(smtp_app, smtp, make_message, signed_in):
    from outbox.auth import tokens

    smtp.recorder.rcpt_replies.update({B: "550 5.1.1 no such user", C: "451 4.3.0 later"})
    message = make_message(to=[A, "Bee <b@example.com>"], bcc=[C])
    Worker().drain()
    token = tokens.create("shop")
    answer = signed_in.get(
        f"/api/messages/{message.id}", headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 200
    shown = answer.get_json()
    assert (shown["status"], shown["partly_delivered"]) == ("deferred", True)
    assert shown["recipients"] == [
        {"kind": "to", "address": A, "name": "", "state": "sent", "code": None, "reply": None,
         "attempts": 1},
        {"kind": "to", "address": B, "name": "Bee", "state": "failed", "code": 550,
         "reply": "5.1.1 no such user", "attempts": 1},
        {"kind": "bcc", "address": C, "name": "", "state": "deferred", "code": 451,
         "reply": "4.3.0 later", "attempts": 1},
    ]  # fmt: skip
    page = signed_in.get(f"/messages/{message.id}").get_data(as_text=True)
    assert "partly delivered" in page
    assert "550 5.1.1 no such user" in page and "451 4.3.0 later" in page


def test_a_fault_of_the_server_defers_the_batch_spends_no_attempt_and_shows_a_banner(
    smtp_app, smtp, make_message, signed_in
):
    sender = "outbox@example.com"
    smtp.recorder.mail_replies[sender] = "530 5.7.0 Authentication required"
    # One on its last attempt: a fault never fails it.
    messages = [make_message(from_addr=sender, max_attempts=n) for n in (1, 5, 5)]
    row_allowance = {m.id: m.max_attempts for m in messages}
    worker = Worker()
    tally = worker.drain()
    assert (tally.deferred, tally.sent, tally.failed) == (3, 0, 0)
    for message in messages:
        row = fresh(message.id)
        # Counted for the retry schedule, and added to the allowance: none of it spent.
        assert (row.status, row.attempts) == (Status.DEFERRED, 1)
        assert row.max_attempts == row_allowance[message.id] + 1
        assert row.last_error.startswith("530 5.7.0 Authentication required at 127.0.0.1:")
        assert [a.outcome for a in attempts_of(message.id)] == ["deferred"]
    assert smtp.recorder.connections == 1  # the batch stopped at the first fault
    dashboard = signed_in.get("/").get_data(as_text=True)
    assert "Sending is failing: 530 5.7.0 Authentication required at 127.0.0.1:" in dashboard
    del smtp.recorder.mail_replies[sender]
    for message in messages:
        make_due(message.id)
    assert worker.drain().sent == 3
    assert "Sending is failing" not in signed_in.get("/").get_data(as_text=True)
