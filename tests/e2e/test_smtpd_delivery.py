"""Real clients hand mail to a real `outbox smtpd`; a worker sends it on with the bytes intact.

smtplib, Flask-Mail and Django's SMTP backend each submit over STARTTLS with an API
token to the `outbox smtpd` process, on every database; a worker then sends what was
queued to the test SMTP server, which must get the client's bytes: the same header
fields in the same order and the same body, less a Bcc field, plus only what outbox
may add (tests/support/smtpd_process.py). The envelope comes from RCPT TO, so Bcc gets it.
"""

import base64
import smtplib
from collections.abc import Callable
from email.message import EmailMessage
from email.policy import SMTP, SMTPUTF8
from typing import Any

import flask_mail
import pytest
from flask import Flask
from sqlalchemy import select

from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.smtpd import Received, SmtpServer
from tests.support.smtpd_process import assert_intact, connect, run_python, running

pytestmark = pytest.mark.all_databases


def delivered(smtp: SmtpServer, message_id: str) -> list[Received]:
    """Send everything queued with a worker; what the SMTP server got of one mail."""
    tally = Worker().drain()
    assert (tally.failed, tally.deferred) == (0, 0), tally
    return [r for r in smtp.received if r.message_id == message_id]


def queued(message_id: str) -> Message:
    row = db.session.execute(select(Message).where(Message.message_id == message_id)).scalar_one()
    db.session.commit()
    return row


def shop_mail() -> EmailMessage:
    """A multipart mail with an 8-bit text part, an HTML part, an attachment and a Bcc."""
    mail = EmailMessage(policy=SMTP)
    mail["From"] = "Shop <shop@example.com>"
    mail["To"] = "Ann <ann@example.com>"
    mail["Cc"] = "bob@example.org"
    mail["Bcc"] = "audit@example.net"
    mail["Subject"] = "Your order: Grüße"
    mail["Message-ID"] = "<order-4711@shop.example.com>"
    mail.set_content("Grüße aus Köln\n.a line that starts with a dot\n", cte="8bit")
    mail.add_alternative("<p>Grüße</p>\n", subtype="html")
    mail.add_attachment(b"\x00\x01binary", maintype="application", subtype="octet-stream",
                        filename="a.bin")  # fmt: skip
    return mail


def test_smtplib_mail_is_sent_on_intact_and_bcc_gets_it_hidden(smtp_app, smtp, port, certs, token):
    sent = shop_mail().as_bytes()
    client = connect(port, certs, "shop", token)
    client.mail("shop@example.com", ["BODY=8BITMIME"])
    for rcpt in ("ann@example.com", "bob@example.org", "audit@example.net"):
        client.rcpt(rcpt)
    code, reply = client.data(sent)
    client.quit()
    row = queued("<order-4711@shop.example.com>")
    assert (code, reply) == (250, f"2.0.0 queued as {row.id}".encode())
    assert row.source == "smtp:shop"
    [got] = delivered(smtp, "<order-4711@shop.example.com>")
    assert sorted(got.rcpt_tos) == ["ann@example.com", "audit@example.net", "bob@example.org"]
    added = assert_intact(sent, got.content)
    assert [f.split(b":")[0] for f in added] == [b"Date"]  # it came with a Message-ID
    assert b"audit@" not in got.content


def test_a_utf8_address_and_an_idn_domain_go_through_with_smtputf8(
    smtp_app, smtp, port, certs, token
):
    mail = EmailMessage(policy=SMTPUTF8)
    mail["From"] = "Jörg <jörg@bücher.example>"
    mail["To"] = "zoë@example.com, ann@bücher.example"
    mail["Subject"] = "Grüße"
    mail.set_content("Grüße\n", cte="8bit")
    sent = mail.as_bytes()
    client = connect(port, certs, "shop", token)
    refused = client.sendmail("jörg@bücher.example", ["zoë@example.com", "ann@bücher.example"],
                              sent, mail_options=["SMTPUTF8", "BODY=8BITMIME"])  # fmt: skip
    client.quit()
    assert refused == {}
    [row] = db.session.execute(select(Message.message_id, Message.source)).all()
    db.session.commit()
    [got] = delivered(smtp, row.message_id)
    # The envelope's domains go as A-labels (outbox.addresses.a_label), as for API mail.
    assert sorted(got.rcpt_tos) == ["ann@xn--bcher-kva.example", "zoë@example.com"]
    added = assert_intact(sent, got.content)
    assert sorted(f.split(b":")[0] for f in added) == [b"Date", b"Message-ID"]


def recording(sendmail: Callable[..., Any], sent: list[bytes]) -> Callable[..., Any]:
    """An SMTP client's sendmail that keeps the bytes it was given to send."""

    def send(from_addr: str, to_addrs: list[str], msg: bytes, *args: Any, **kwargs: Any) -> Any:
        sent.append(msg)
        return sendmail(from_addr, to_addrs, msg, *args, **kwargs)

    return send


def test_flask_mail_pointed_at_smtpd_gets_its_mail_sent_intact(smtp_app, smtp, port, token):
    shop = Flask("shop")
    shop.config.update(MAIL_SERVER="127.0.0.1", MAIL_PORT=port, MAIL_USE_TLS=True,
                       MAIL_USERNAME="shop", MAIL_PASSWORD=token,
                       MAIL_DEFAULT_SENDER="Shop <shop@example.com>")  # fmt: skip
    mail = flask_mail.Mail(shop)
    message = flask_mail.Message("Your order", recipients=["ann@example.com"],
                                 bcc=["audit@example.net"], body="Grüße\nfrom the shop\n",
                                 html="<p>Grüße</p>")  # fmt: skip
    message.attach("order.csv", "text/csv", b"id,total\r\n4711,12.50\r\n")
    sent: list[bytes] = []
    with shop.app_context(), mail.connect() as conn:
        assert conn.host is not None
        conn.host.sendmail = recording(conn.host.sendmail, sent)  # type: ignore[method-assign]
        conn.send(message)
    [got] = delivered(smtp, message.msgId)
    assert sorted(got.rcpt_tos) == ["ann@example.com", "audit@example.net"]
    assert_intact(sent[0], got.content)
    assert queued(message.msgId).source == "smtp:shop"


DJANGO = """
import base64, smtplib, sys
from django.conf import settings
settings.configure(EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
                   EMAIL_HOST="127.0.0.1", EMAIL_PORT={port}, EMAIL_USE_TLS=True,
                   EMAIL_HOST_USER="shop", EMAIL_HOST_PASSWORD="{token}", EMAIL_TIMEOUT=30)
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.mail.backends.smtp import EmailBackend

class Recording(EmailBackend):
    def open(self):
        opened = super().open()
        send = self.connection.sendmail
        def sendmail(from_addr, to_addrs, msg, *args, **kwargs):
            sys.stdout.write(base64.b64encode(msg).decode() + "\\n")
            return send(from_addr, to_addrs, msg, *args, **kwargs)
        self.connection.sendmail = sendmail
        return opened

mail = EmailMultiAlternatives("Your order", "Grüße\\nfrom the shop\\n", "shop@example.com",
                              ["ann@example.com"], bcc=["audit@example.net"],
                              cc=["bob@example.org"], reply_to=["help@example.com"],
                              headers={{"X-Order": "4711"}},
                              connection=Recording())
mail.attach_alternative("<p>Grüße</p>", "text/html")
mail.attach("order.csv", "id,total\\n4711,12.50\\n", "text/csv")
assert mail.send() == 1
"""


def test_djangos_smtp_backend_pointed_at_smtpd_gets_its_mail_sent_intact(
    smtp_app, smtp, port, certs, token
):
    # Django's backend checks the certificate against the default CAs: this test's CA.
    done = run_python(DJANGO.format(port=port, token=token), {"SSL_CERT_FILE": str(certs.ca_file)})
    assert done.returncode == 0, done.stderr
    sent = base64.b64decode(done.stdout.strip())
    [row] = db.session.execute(select(Message.message_id, Message.source)).all()
    db.session.commit()
    assert row.source == "smtp:shop"
    [got] = delivered(smtp, row.message_id)
    assert sorted(got.rcpt_tos) == ["ann@example.com", "audit@example.net", "bob@example.org"]
    assert assert_intact(sent, got.content) == []  # Django writes Date and Message-ID itself


def test_plain_login_without_tls_when_the_setting_allows_it(
    smtp_app, smtp, database_url, tmp_path, token
):
    with running(database_url, tmp_path, None, SMTPD_ALLOW_PLAINTEXT_AUTH="true") as smtpd:
        client = smtplib.SMTP("127.0.0.1", smtpd.port, timeout=30)
        client.login("shop", token)
        sent = b"From: shop@example.com\r\nTo: ann@example.com\r\nSubject: hi\r\n\r\nhi\r\n"
        client.sendmail("shop@example.com", ["ann@example.com"], sent)
        client.quit()
        assert "WARNING smtpd: AUTH is allowed without TLS" in smtpd.log.read_text()
    [row] = db.session.execute(select(Message.message_id)).all()
    db.session.commit()
    [got] = delivered(smtp, row.message_id)
    assert_intact(sent, got.content)
