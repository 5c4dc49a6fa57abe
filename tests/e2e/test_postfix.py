"""outbox against smtp-sink and a real Postfix: what each offers, what arrives, long lines."""

from email import message_from_bytes, policy

import pytest

from tests.support.smtp_sink import Delivered
from tests.support.wire import send

SERVERS = ["smtp_sink", "smtp_sink_7bit", "postfix_smtpd", "postfix_smtpd_7bit", "postfix_relay"]
# What each server answers EHLO with, of the keywords that decide how outbox sends.
OFFERS = {
    "smtp_sink": {"PIPELINING", "8BITMIME"},
    "smtp_sink_7bit": {"PIPELINING"},
    "postfix_smtpd": {"PIPELINING", "8BITMIME", "SMTPUTF8"},
    "postfix_smtpd_7bit": {"PIPELINING"},
    "postfix_relay": {"PIPELINING", "8BITMIME", "SMTPUTF8"},
}
SUBJECT = "Grüße aus Köln: ½ € 中文"
TEXT = "Hallo Welt.\n.a line that starts with a dot\n.\nFrom the start of a line\nÜberall ünïcödé"
LONG = "<p>" + "minified html " * 214 + "</p>"  # 3,000 characters on one line


def text_of(mail: Delivered) -> str:
    """The text/plain body, with the line ends as written (LF) and none at the end."""
    parsed = message_from_bytes(mail.content, policy=policy.default)
    assert not parsed.defects
    text = parsed.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    return text.replace("\r\n", "\n").rstrip("\n")


@pytest.mark.parametrize("name", SERVERS)
def test_each_server_offers_what_its_fixture_says(request, name):
    server = request.getfixturevalue(name)
    assert server.ehlo & {"PIPELINING", "8BITMIME", "SMTPUTF8"} == OFFERS[name]


@pytest.mark.parametrize("name", SERVERS)
def test_a_message_arrives_with_its_envelope_subject_and_body(app, make_message, request, name):
    server = request.getfixturevalue(name)
    to = ["ann@example.com", "bob@example.org"]
    message, mails = send(app, make_message, server, to=to, subject=SUBJECT, text=TEXT)
    # smtp-sink keeps one mail with every recipient; Postfix's Maildir one copy each.
    assert sorted(rcpt for mail in mails for rcpt in mail.rcpt_tos) == to
    for mail in mails:
        assert mail.mail_from == "outbox@example.com"
        assert mail.message_id == message.message_id
        assert message_from_bytes(mail.content, policy=policy.default)["Subject"] == SUBJECT
        assert text_of(mail) == TEXT


def test_postfix_puts_a_long_line_whole_into_its_maildir(app, make_message, postfix_smtpd):
    # Postfix stores a line over line_length_limit (2048) in pieces and joins them again
    # when it delivers the mail itself.
    _, (mail,) = send(app, make_message, postfix_smtpd, text=LONG)
    assert text_of(mail) == LONG


def test_a_long_line_passes_a_postfix_relay_unchanged(app, make_message, postfix_relay):
    # Postfix's SMTP client breaks a line over smtp_line_length_limit (998) by inserting
    # CRLF SPACE, which would change the text (and break HTML, base64 or a signature):
    # outbox writes no such line.
    _, (mail,) = send(app, make_message, postfix_relay, text=LONG)
    assert max(len(line) for line in mail.content.split(b"\r\n")) <= 998
    assert text_of(mail) == LONG
