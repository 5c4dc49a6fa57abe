"""Reading bounce mails (outbox.bounces.parse), without a database."""

import pytest

from outbox.capabilities.bounces import parse
from tests.support import bouncemail

TO, WHO, MID = "bounces+1-0-aaaaaaaaaaaaaaaa@example.com", "ann@example.org", "<m1@example.com>"


@pytest.mark.parametrize(
    ("build", "status", "said"),
    [(bouncemail.postfix, "5.1.1", "smtp; 550 5.1.1 <ann@example.org>: Recipient address "
      "rejected: User unknown in local recipient table"),
     (bouncemail.exim, "5.1.1", "host mx.example.org [192.0.2.25] SMTP error from remote mail "
      "server after RCPT TO:<ann@example.org>: 550 5.1.1 User unknown"),
     (bouncemail.exchange, "5.1.10", "smtp;550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient "
      "not found by SMTP address lookup"),
     (bouncemail.gmail, "5.1.1", "smtp; 550-5.1.1 The email account that you tried to reach "
      "does not exist.")],
)  # fmt: skip
def test_each_mtas_hard_bounce_names_the_recipient_status_and_returned_message(build, status, said):
    found = parse.read(build(TO, WHO, MID))
    assert found.kind == parse.HARD
    assert [(f.address, f.status, f.diagnostic, f.hard) for f in found.failures] == [
        (WHO, status, said, True)
    ]
    assert found.message_id == MID  # the returned mail's, never the bounce's own
    assert TO in found.to_headers


def test_the_smtp_code_and_the_servers_words_are_read_from_the_diagnostic():
    (failure,) = parse.read(bouncemail.postfix(TO, WHO, MID)).failures
    assert failure.smtp_code == 550
    assert failure.said == (
        "5.1.1 <ann@example.org>: Recipient address rejected: User unknown in local recipient table"
    )
    (failure,) = parse.read(bouncemail.gmail(TO, WHO, MID)).failures
    assert failure.smtp_code == 550  # Gmail's multi-line form: 550-5.1.1
    assert failure.said == "5.1.1 The email account that you tried to reach does not exist."
    (failure,) = parse.read(bouncemail.exim(TO, WHO, MID)).failures
    assert failure.smtp_code is None  # Exim's words do not start with the code
    assert failure.said.startswith("host mx.example.org [192.0.2.25] SMTP error")


def test_a_delay_is_soft():
    found = parse.read(bouncemail.gmail(TO, WHO, MID, delayed=True))
    assert found.kind == parse.SOFT
    assert [(f.action, f.status, f.hard) for f in found.failures] == [("delayed", "4.4.1", False)]


def test_a_failure_with_a_4xx_status_is_soft_and_a_success_report_is_no_failure():
    expired = bouncemail.postfix(TO, WHO, MID, status="4.4.1", reply="connect timed out")
    assert parse.read(expired).kind == parse.SOFT
    relayed = bouncemail.postfix(TO, WHO, MID, status="2.0.0", reply="250 ok", action="relayed")
    assert parse.read(relayed).kind == parse.OTHER


def test_a_report_on_two_recipients_lists_both():
    raw = bouncemail.postfix(TO, WHO, MID).replace(
        b"Diagnostic-Code: smtp; 550",
        b"Diagnostic-Code: smtp; 550 gone\r\n\r\nFinal-Recipient: rfc822; bob@example.org\r\n"
        b"Action: delayed\r\nStatus: 4.2.2\r\nDiagnostic-Code: smtp; 452 4.2.2 full\r\nX-Was: 550",
    )
    found = parse.read(raw)
    assert found.kind == parse.HARD
    assert [(f.address, f.status, f.hard) for f in found.failures] == [
        (WHO, "5.1.1", True), ("bob@example.org", "4.2.2", False)
    ]  # fmt: skip


def test_an_out_of_office_is_an_auto_reply_not_a_bounce():
    found = parse.read(bouncemail.out_of_office(TO, WHO))
    assert (found.kind, found.failures) == (parse.AUTO_REPLY, [])


@pytest.mark.parametrize(
    "raw",
    [bouncemail.stray(TO), b"", b"\xff\xfe garbage \x00\r\n\r\n\r\n",
     b"Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\n--x\r\n"
     b"Content-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; x\r\n"],
)  # fmt: skip
def test_what_is_no_bounce_is_unparsed_and_never_raises(raw):
    found = parse.read(raw)
    assert (found.kind, found.failures) == (parse.UNPARSED, [])
