"""What relays and clients hand `outbox smtpd` at the edges of SMTP, each kept whole.

A real Postfix smarthost splits 60 recipients into transactions of 50 and 10; a client
that gets outbox's own 452 sends the rest in a second transaction; a client that lost a
250 sends the same transaction again: each recipient gets the mail, once. swaks hands
over a mail with the null sender and one with a Resent-Bcc field, and a worker sends
each on to a real server, which records the envelope and the bytes.
"""

import smtplib
import subprocess

import pytest
from sqlalchemy import select

from outbox.capabilities.bounces import store as bounces
from outbox.capabilities.submission.server import MAX_RECIPIENTS
from outbox.models import BounceMail, Message, Suppression
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support import bouncemail
from tests.support.postfix import POSTFIX, Postfix, Smarthost, require
from tests.support.smtpd import SmtpServer
from tests.support.smtpd_process import assert_intact, connect

pytestmark = pytest.mark.all_databases

SWAKS = "/usr/bin/swaks"
MESSAGE_ID = "<split-1@shop.example.com>"
MAIL = (
    b"From: Shop <shop@example.com>\r\n"
    b"To: Customers <customers@shop.example.com>\r\n"
    b"Subject: Your order has shipped\r\n"
    b"Date: Fri, 27 Nov 2026 08:00:00 +0000\r\n"
    b"Message-ID: " + MESSAGE_ID.encode() + b"\r\n"
    b"\r\n"
    b"It is on its way.\r\n"
)


def parts(message_id: str = MESSAGE_ID) -> list[Message]:
    """The rows queued under a Message-ID, oldest first."""
    found = db.session.scalars(
        select(Message).where(Message.message_id == message_id).order_by(Message.id)
    ).all()
    db.session.commit()
    return list(found)


def sent_to(smtp: SmtpServer, count: int) -> list[str]:
    """Send what is queued (count mails) with a worker; every recipient the server got."""
    assert Worker().drain() == Tally(sent=count)
    return sorted(r for got in smtp.received if got.message_id == MESSAGE_ID for r in got.rcpt_tos)


def test_a_postfix_smarthost_splitting_60_recipients_gets_each_one_queued_and_sent(
    smtp_app, smtp, port, certs, token
):
    require(POSTFIX)
    relay = Postfix(smarthost=Smarthost("127.0.0.1", port, "shop", token, certs.ca_file))
    recipients = [f"customer{n:02d}@example.com" for n in range(60)]
    try:
        with smtplib.SMTP(relay.host, relay.port, timeout=30) as client:
            assert client.sendmail("shop@example.com", recipients, MAIL) == {}
        relay.drained()  # AssertionError with Postfix's log if outbox refused a part
    finally:
        relay.stop()
    found = parts()
    assert sorted(len(row.recipients) for row in found) == [10, 50]  # Postfix's split
    queued = [e["address"] for row in found for e in row.recipients]
    assert sorted(queued) == recipients
    assert sent_to(smtp, 2) == recipients


def test_a_client_refused_with_452_sends_the_rest_in_a_second_transaction(
    smtp_app, smtp, port, certs, token
):
    recipients = [f"c{n:04d}@example.com" for n in range(MAX_RECIPIENTS + 1)]
    client = connect(port, certs, "shop", token)
    refused = client.sendmail("shop@example.com", recipients, MAIL)
    assert list(refused) == recipients[-1:] and refused[recipients[-1]][0] == 452
    # RFC 5321 4.5.3.1.10: the client sends the mail to the refused ones in a new transaction.
    assert client.sendmail("shop@example.com", recipients[-1:], MAIL) == {}
    client.quit()
    assert [len(row.recipients) for row in parts()] == [MAX_RECIPIENTS, 1]
    assert sent_to(smtp, 2) == recipients


def test_a_client_that_lost_the_250_sends_again_and_the_mail_is_queued_once(
    smtp_app, smtp, port, certs, token
):
    client = connect(port, certs, "shop", token)
    assert client.sendmail("shop@example.com", ["ann@example.com", "bob@example.com"], MAIL) == {}
    [first] = parts()
    # The 250 lost on the way back, the same transaction comes again (here with the
    # recipients in another order, on another connection): the same answer, nothing new.
    client.close()
    client = connect(port, certs, "shop", token)
    client.mail("shop@example.com")
    client.rcpt("bob@example.com")
    client.rcpt("ann@example.com")
    assert client.data(MAIL) == (250, f"2.0.0 queued as {first.id}".encode())
    assert [row.id for row in parts()] == [first.id]
    # A part of it whose recipients are all queued already is a retry grouped otherwise.
    client.mail("shop@example.com")
    client.rcpt("ann@example.com")
    assert client.data(MAIL) == (250, f"2.0.0 queued as {first.id}".encode())
    # Another mail under the same Message-ID is still refused, naming it.
    client.mail("shop@example.com")
    client.rcpt("carl@example.com")
    code, text = client.data(MAIL.replace(b"on its way", b"delayed"))
    assert code == 554 and b"was queued already for another mail" in text
    client.quit()
    assert [row.id for row in parts()] == [first.id]
    assert sent_to(smtp, 1) == ["ann@example.com", "bob@example.com"]


def swaks(port: int, token: str, *args: str) -> str:
    """swaks handing one mail to outbox smtpd over STARTTLS with the token; its transcript."""
    done = subprocess.run(
        [SWAKS, "--server", f"127.0.0.1:{port}", "--tls", "--auth", "PLAIN",
         "--auth-user", "shop", "--auth-password", token, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_report_with_the_null_sender_goes_on_with_mail_from_empty_and_takes_no_bounce(
    app, port, token, tmp_path, postfix_smtpd, make_message
):
    require(SWAKS)
    report = (b"From: MAILER-DAEMON@relay.example.com\r\nTo: shop@example.com\r\n"
              b"Subject: Undelivered Mail Returned to Sender\r\n"
              b"Message-ID: <report-1@relay.example.com>\r\n"
              b"\r\nThe mail could not go.\r\n")  # fmt: skip
    (tmp_path / "report.eml").write_bytes(report)
    said = swaks(port, token, "--from", "<>", "--to", "ann@example.com",
                 "--data", str(tmp_path / "report.eml"))  # fmt: skip
    [row] = parts("<report-1@relay.example.com>")
    assert "<~  250 2.1.0 OK" in said and f"<~  250 2.0.0 queued as {row.id}" in said
    assert row.envelope_from == ""
    # VERP on: an API message goes with its recipient's return path, the report with none.
    app.config["BOUNCE_ADDRESS"] = "bounces@example.com"
    mail = app.extensions["mail"]
    app.config["MAIL_SERVER"], app.config["MAIL_PORT"] = postfix_smtpd.host, postfix_smtpd.port
    mail.server, mail.port = postfix_smtpd.host, postfix_smtpd.port
    make_message(to=["bob@example.com"])
    assert Worker().drain() == Tally(sent=2)
    paths = {got.rcpt_tos[0]: got.mail_from for got in postfix_smtpd.delivered(2)}
    assert paths["ann@example.com"] == ""
    assert paths["bob@example.com"].startswith("bounces+")
    # A "bounce" of it (nothing should send one; matched by its Message-ID) marks nothing.
    app.config["BOUNCE_ADDRESS"] = None
    pk = bounces.take_in(
        bouncemail.postfix("shop@example.com", "ann@example.com", row.message_id), "smtp"
    )
    bounce = db.session.get_one(BounceMail, pk)
    assert (bounce.message_pk, bounce.note) == (row.id, bounces.NULL_SENDER)
    db.session.refresh(row)
    assert row.recipients[0].get("state") != "bounced"
    assert db.session.scalars(select(Suppression)).all() == []


def test_resent_bcc_is_taken_out_as_bcc_is_and_its_recipient_still_gets_the_mail(
    smtp_app, smtp, port, token, tmp_path
):
    require(SWAKS)
    forwarded = (b"Resent-From: desk@shop.example.com\r\nResent-To: ann@example.com\r\n"
                 b"Resent-Bcc: audit@example.net\r\n"
                 b"Resent-Date: Fri, 27 Nov 2026 09:00:00 +0000\r\n"
                 b"Resent-Message-ID: <resent-1@shop.example.com>\r\n" + MAIL)  # fmt: skip
    (tmp_path / "forwarded.eml").write_bytes(forwarded)
    to = "ann@example.com,audit@example.net"
    swaks(port, token, "--from", "desk@shop.example.com", "--to", to,
          "--data", str(tmp_path / "forwarded.eml"))  # fmt: skip
    assert Worker().drain() == Tally(sent=1)
    [got] = smtp.received
    assert sorted(got.rcpt_tos) == ["ann@example.com", "audit@example.net"]
    assert b"audit@" not in got.content
    # swaks writes a CRLF of its own before the final dot.
    assert assert_intact(forwarded + b"\r\n", got.content) == []
