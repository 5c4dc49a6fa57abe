"""Bounce mails as real MTAs write them, built from their published formats for the tests.

Postfix, Microsoft Exchange and Gmail send RFC 3464 reports (multipart/report;
report-type=delivery-status), each with its own wording, fields and way of returning
the mail; Exim sends its own plain text ("This message was created automatically by
mail delivery software.") with X-Failed-Recipients. An out-of-office answer is not a
bounce. Every builder returns the raw bytes as the MTA would send them.
"""

import os
import sys
from collections.abc import Iterator
from email.utils import formatdate

import pytest

from . import processes
from .smtpd import free_port

MAX_BYTES = 200_000


DATE = formatdate(1795000000)


def returned(message_id: str, sender: str, recipient: str, subject: str = "Hello") -> str:
    """The head of the mail that bounced, as a bounce quotes it."""
    return (f"Return-Path: <{sender}>\r\nFrom: Shop <shop@example.com>\r\nTo: {recipient}\r\n"
            f"Subject: {subject}\r\nMessage-ID: {message_id}\r\nDate: {DATE}\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n")  # fmt: skip


def postfix(to: str, recipient: str, message_id: str, status: str = "5.1.1",
            reply: str = "550 5.1.1 <{r}>: Recipient address rejected: User unknown in local "
                         "recipient table", action: str = "failed") -> bytes:  # fmt: skip
    """Postfix's bounce(8) notice: three parts, the mail returned whole as message/rfc822."""
    said = reply.format(r=recipient)
    text = (
        f"Return-Path: <>\r\nDate: {DATE}\r\n"
        "From: MAILER-DAEMON@mx.example.net (Mail Delivery System)\r\n"
        f"Subject: Undelivered Mail Returned to Sender\r\nTo: {to}\r\n"
        "Auto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n"
        "Content-Type: multipart/report; report-type=delivery-status;\r\n"
        '\tboundary="4Xk2QJ0bz.1795000000/mx.example.net"\r\n'
        "Content-Transfer-Encoding: 8bit\r\n"
        "Message-Id: <20261124052000.4Xk2QJ0bz@mx.example.net>\r\n\r\n"
        "This is a MIME-encapsulated message.\r\n\r\n"
        "--4Xk2QJ0bz.1795000000/mx.example.net\r\n"
        "Content-Description: Notification\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
        "This is the mail system at host mx.example.net.\r\n\r\n"
        "I'm sorry to have to inform you that your message could not\r\n"
        "be delivered to one or more recipients. It's attached below.\r\n\r\n"
        "For further assistance, please send mail to postmaster.\r\n\r\n"
        "                   The mail system\r\n\r\n"
        f"<{recipient}>: host mx.example.org[192.0.2.25] said: {said} (in reply to\r\n"
        "    RCPT TO command)\r\n\r\n"
        "--4Xk2QJ0bz.1795000000/mx.example.net\r\n"
        "Content-Description: Delivery report\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.net\r\nX-Postfix-Queue-ID: 4Xk2QJ0bz\r\n"
        f"X-Postfix-Sender: rfc822; {to}\r\nArrival-Date: {DATE}\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\nOriginal-Recipient: rfc822;{recipient}\r\n"
        f"Action: {action}\r\nStatus: {status}\r\nRemote-MTA: dns; mx.example.org\r\n"
        f"Diagnostic-Code: smtp; {said}\r\n\r\n"
        "--4Xk2QJ0bz.1795000000/mx.example.net\r\n"
        "Content-Description: Undelivered Message\r\nContent-Type: message/rfc822\r\n"
        "Content-Transfer-Encoding: 8bit\r\n\r\n"
        f"{returned(message_id, to, recipient)}\r\nHello there\r\n\r\n"
        "--4Xk2QJ0bz.1795000000/mx.example.net--\r\n"
    )
    return text.encode()


def exim(to: str, recipient: str, message_id: str) -> bytes:
    """Exim's own bounce: plain text, X-Failed-Recipients, the mail quoted after a rule."""
    text = (
        f"Return-path: <>\r\nEnvelope-to: {to}\r\nDelivery-date: {DATE}\r\n"
        "Received: from Debian-exim by mx.example.net with local (Exim 4.96)\r\n"
        "\tid 1tFq2X-000abc-1A for " + to + "; " + DATE + "\r\n"
        f"X-Failed-Recipients: {recipient}\r\nAuto-Submitted: auto-replied\r\n"
        "From: Mail Delivery System <Mailer-Daemon@mx.example.net>\r\n"
        f"To: {to}\r\nContent-Type: text/plain; charset=us-ascii\r\n"
        "Subject: Mail delivery failed: returning message to sender\r\n"
        "Message-Id: <E1tFq2X-000abc-1A@mx.example.net>\r\n"
        f"Date: {DATE}\r\n\r\n"
        "This message was created automatically by mail delivery software.\r\n\r\n"
        "A message that you sent could not be delivered to one or more of its\r\n"
        "recipients. This is a permanent error. The following address(es) failed:\r\n\r\n"
        f"  {recipient}\r\n"
        "    host mx.example.org [192.0.2.25]\r\n"
        f"    SMTP error from remote mail server after RCPT TO:<{recipient}>:\r\n"
        "    550 5.1.1 User unknown\r\n\r\n"
        "------ This is a copy of the message, including all the headers. ------\r\n\r\n"
        f"{returned(message_id, to, recipient)}\r\nHello there\r\n"
    )
    return text.encode()


def exchange(to: str, recipient: str, message_id: str) -> bytes:
    """Microsoft Exchange's NDR: a report whose third part returns only the headers."""
    text = (
        "From: postmaster@contoso.example\r\n"
        f"To: {to}\r\nDate: {DATE}\r\nSubject: Undeliverable: Hello\r\n"
        "Content-Type: multipart/report; report-type=delivery-status;\r\n"
        '\tboundary="b1_f3e4a9c0"\r\n'
        "Content-Language: en-US\r\nMessage-ID: <0a1b2c3d-ndr@EX01.contoso.example>\r\n"
        "MIME-Version: 1.0\r\nAuto-Submitted: auto-replied\r\n"
        "X-MS-Exchange-Message-Is-Ndr:\r\n\r\n"
        '--b1_f3e4a9c0\r\nContent-Type: text/plain; charset="us-ascii"\r\n'
        "Content-Transfer-Encoding: quoted-printable\r\n\r\n"
        "Delivery has failed to these recipients or groups:\r\n\r\n"
        f"{recipient}\r\nThe email address you entered couldn't be found. Please check the =\r\n"
        "recipient's email address and try to resend the message.\r\n\r\n"
        "Diagnostic information for administrators:\r\n\r\n"
        "Generating server: EX01.contoso.example\r\n\r\n"
        f"{recipient}\r\nRemote Server returned '550 5.1.10 RESOLVER.ADR.RecipientNotFound; =\r\n"
        "Recipient not found by SMTP address lookup'\r\n\r\n"
        "--b1_f3e4a9c0\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns;EX01.contoso.example\r\n"
        f"Received-From-MTA: dns;mail.example.com\r\nArrival-Date: {DATE}\r\n\r\n"
        f"Final-Recipient: rfc822;{recipient}\r\nAction: failed\r\nStatus: 5.1.10\r\n"
        "Diagnostic-Code: smtp;550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not\r\n"
        " found by SMTP address lookup\r\n"
        f"X-Display-Name: {recipient}\r\n\r\n"
        "--b1_f3e4a9c0\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"{returned(message_id, to, recipient)}\r\n"
        "--b1_f3e4a9c0--\r\n"
    )
    return text.encode()


def gmail(to: str, recipient: str, message_id: str, delayed: bool = False) -> bytes:
    """Gmail's Delivery Status Notification, failure or delay, HTML beside the text."""
    action, status = ("delayed", "4.4.1") if delayed else ("failed", "5.1.1")
    said = ("421-4.4.1 Timeout while connecting" if delayed else
            "550-5.1.1 The email account that you tried to reach does not exist.")  # fmt: skip
    title = "Delay" if delayed else "Failure"
    text = (
        "Return-Path: <>\r\nMIME-Version: 1.0\r\n"
        "From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>\r\n"
        f"To: {to}\r\nAuto-Submitted: auto-replied\r\n"
        f"Subject: Delivery Status Notification ({title})\r\n"
        "Message-ID: <65f1c0de.abc.gmail-dsn@mx.google.com>\r\n"
        f"Date: {DATE}\r\n"
        'Content-Type: multipart/report; boundary="000000000000f00d"; '
        "report-type=delivery-status\r\n\r\n"
        "--000000000000f00d\r\n"
        'Content-Type: multipart/related; boundary="000000000000beef"\r\n\r\n'
        "--000000000000beef\r\n"
        'Content-Type: multipart/alternative; boundary="000000000000cafe"\r\n\r\n'
        '--000000000000cafe\r\nContent-Type: text/plain; charset="UTF-8"\r\n\r\n'
        f"** Address not found **\r\n\r\nYour message wasn't delivered to {recipient} "
        "because the address couldn't be found.\r\n\r\n"
        f"The response from the remote server was:\r\n{said}\r\n\r\n"
        '--000000000000cafe\r\nContent-Type: text/html; charset="UTF-8"\r\n\r\n'
        f"<html><body><p>Your message wasn't delivered to <b>{recipient}</b>.</p></body></html>\r\n"
        "--000000000000cafe--\r\n\r\n--000000000000beef--\r\n"
        "--000000000000f00d\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; googlemail.com\r\n"
        f"Arrival-Date: {DATE}\r\nX-Original-Message-ID: {message_id}\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\nAction: {action}\r\nStatus: {status}\r\n"
        "Remote-MTA: dns; gmail-smtp-in.l.google.com. 2a00:1450:400c:c06::1b\r\n"
        f"Diagnostic-Code: smtp; {said}\r\nLast-Attempt-Date: {DATE}\r\n\r\n"
        "--000000000000f00d\r\nContent-Type: message/rfc822\r\n\r\n"
        f"{returned(message_id, to, recipient)}\r\nHello there\r\n\r\n"
        "--000000000000f00d--\r\n"
    )
    return text.encode()


def out_of_office(to: str, person: str, subject: str = "Hello") -> bytes:
    """A person's out-of-office answer (Exchange's wording): not a bounce."""
    text = (
        f"From: Ann Example <{person}>\r\nTo: {to}\r\nDate: {DATE}\r\n"
        f"Subject: Automatic reply: {subject}\r\nAuto-Submitted: auto-replied\r\n"
        "X-Auto-Response-Suppress: All\r\nX-Autoreply: yes\r\n"
        "Message-ID: <ooo-1@example.org>\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
        "I am out of the office until Monday and will read your mail then.\r\n"
    )
    return text.encode()


def stray(to: str) -> bytes:
    """A mail to the bounce address that is neither a bounce nor an auto-reply."""
    text = (
        f"From: someone@example.org\r\nTo: {to}\r\nDate: {DATE}\r\nSubject: Question\r\n"
        "Message-ID: <stray-1@example.org>\r\nContent-Type: text/plain\r\n\r\n"
        "Hello, is this address read by anyone?\r\n"
    )
    return text.encode()


BOUNCES = "bounces@example.com"


@pytest.fixture
def listener(app, tmp_path) -> Iterator[int]:  # type: ignore[no-untyped-def]
    """`outbox bounces --listen` on a free loopback port, on the test's database; its port."""
    port = free_port()
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_SECRET_KEY=app.secret_key,
               OUTBOX_BOUNCE_ADDRESS=BOUNCES, OUTBOX_BOUNCE_MAX_BYTES=str(MAX_BYTES))  # fmt: skip
    command = [sys.executable, "-m", "outbox", "bounces", "--listen", f"127.0.0.1:{port}"]
    with processes.group(command, env=env, stdout=processes.subprocess.PIPE, text=True) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"taking bounces for {BOUNCES} on 127.0.0.1:{port}"), line
        yield port
        assert processes.end(server) == 0
