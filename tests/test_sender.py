"""Building mails from stored rows, sorting SMTP errors, and keeping one connection healthy."""

import base64
import email
import email.policy
import smtplib

import pytest

from outbox import queue, sender
from outbox.drafts import build_draft
from outbox.status import Outcome

DEFERRED, FAILED, SENT = Outcome.DEFERRED, Outcome.FAILED, Outcome.SENT


def stored(make_message, **fields):  # type: ignore[no-untyped-def]
    """A message queued from fields exactly as the API checks and stores them."""
    fields = {"from": "outbox@example.com", "to": "rcpt@example.com", "text": "Hi", **fields}
    return make_message(**vars(build_draft(fields, None)))


def send(*rows) -> list[sender.Result]:  # type: ignore[no-untyped-def]
    """Build and deliver rows in turn over one session, as a worker's batch does."""
    with sender.SmtpSession() as session:
        return [
            sender.deliver(session, sender.build(row, queue.read_attachments(row.id)))
            for row in rows
        ]


def addresses(mail: email.message.EmailMessage, header: str) -> set[tuple[str, str]]:
    return {(a.display_name, a.addr_spec) for a in mail[header].addresses}


def encoded(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_build_makes_the_mail_the_row_describes(smtp_app, smtp, make_message):
    row = stored(
        make_message,
        **{
            "from": "Zoë Outbox <outbox@example.com>",
            # Alone in To: before the gh-121284 fix, Python unquotes a name holding
            # a comma when it refolds a header line longer than 78 characters.
            "to": '"Doe, Jane" <jane@example.com>',
            "cc": ["Carol Ünal <carol@example.com>", "Bob <bob@example.com>"],
            "bcc": "hidden@example.com",
            "reply_to": "Help Desk <help@example.com>",
            "subject": "Grüße",
            "text": "Hello in text",
            "html": "<p>Hello in HTML</p>",
            "headers": {"X-Campaign": "spring"},
            "attachments": [
                {"filename": "report.pdf", "content": encoded(b"%PDF-1.7 fake")},
                {"filename": "résumé – 2024.txt", "content": encoded(b"curriculum")},
            ],
        },
    )
    assert send(row) == [sender.Result(SENT)]

    (received,) = smtp.received
    mail = email.message_from_bytes(received.content, policy=email.policy.default)
    assert mail["Message-ID"] == row.message_id
    assert addresses(mail, "From") == {("Zoë Outbox", "outbox@example.com")}
    assert addresses(mail, "To") == {("Doe, Jane", "jane@example.com")}
    assert addresses(mail, "Cc") == {
        ("Carol Ünal", "carol@example.com"),
        ("Bob", "bob@example.com"),
    }
    assert addresses(mail, "Reply-To") == {("Help Desk", "help@example.com")}
    assert mail["Subject"] == "Grüße"
    assert mail["X-Campaign"] == "spring"
    # Bcc is in the envelope only.
    assert received.mail_from == "outbox@example.com"
    assert sorted(received.rcpt_tos) == [
        "bob@example.com", "carol@example.com", "hidden@example.com", "jane@example.com",
    ]  # fmt: skip
    assert "Bcc" not in mail and b"hidden" not in received.content
    assert mail.get_body(("plain",)).get_content().strip() == "Hello in text"
    assert mail.get_body(("html",)).get_content().strip() == "<p>Hello in HTML</p>"
    assert [
        (part.get_filename(), part.get_content_type(), part.get_payload(decode=True))
        for part in mail.iter_attachments()
    ] == [
        ("report.pdf", "application/pdf", b"%PDF-1.7 fake"),
        ("résumé – 2024.txt", "text/plain", b"curriculum"),
    ]


def test_long_header_lines_fold_without_changing_what_they_say(smtp_app, smtp, make_message):
    names = [f'"Doe, Jane {n}" <jane{n}@example.com>' for n in range(6)]
    row = stored(
        make_message,
        to=names,
        subject="Grüße aus Köln, " * 12,
        html="<p>Hallo</p>",
        headers={"X-Campaign": " – ".join(["Frühling"] * 10), "X-Plain": " ".join(["spring"] * 20)},
    )
    assert send(row) == [sender.Result(SENT)]
    content = smtp.received[0].content
    # Folded: an encoded word of up to 76 characters may follow the field name.
    assert all(len(line) <= 90 for line in content.split(b"\r\n\r\n")[0].split(b"\r\n"))
    mail = email.message_from_bytes(content, policy=email.policy.default)
    assert addresses(mail, "To") == {(f"Doe, Jane {n}", f"jane{n}@example.com") for n in range(6)}
    assert mail["Subject"] == "Grüße aus Köln, " * 12
    assert mail["X-Campaign"] == " – ".join(["Frühling"] * 10)
    assert mail["X-Plain"] == " ".join(["spring"] * 20)
    boundaries = {part.get_boundary() for part in mail.walk() if part.is_multipart()}
    assert len(boundaries) == 2 and all(b.startswith("=_") for b in boundaries)


def test_build_sends_an_html_only_message_with_an_empty_text_part(smtp_app, smtp, make_message):
    row = stored(make_message, text=None, html="<b>only</b>")
    assert send(row) == [sender.Result(SENT)]
    mail = email.message_from_bytes(smtp.received[0].content, policy=email.policy.default)
    assert mail.get_body(("html",)).get_content().strip() == "<b>only</b>"
    assert mail.get_body(("plain",)).get_content().strip() == ""


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("subject", "Hello\r\nBcc: victim@example.com"),
        ("to_addrs", "rcpt@example.com\r\nBcc: victim@example.com"),
        ("cc_addrs", "copy@example.com\r\nBcc: victim@example.com"),
        ("reply_to", "help@example.com\nBcc: victim@example.com"),
        ("headers", {"X-Campaign": "spring\r\nBcc: victim@example.com"}),
        ("headers", {"X-Campaign\r\nBcc": "victim@example.com"}),
    ],
)
def test_build_refuses_a_row_whose_header_holds_a_line_break(app, make_message, column, value):
    row = make_message()
    setattr(row, column, value)
    with pytest.raises(sender.BuildError, match="line break"):
        sender.build(row, [])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("headers", ["X-Campaign", "spring"]),
        ("from_addr", "<>"),
        ("to_addrs", "undisclosed-recipients:;"),  # smtplib would raise SMTPRecipientsRefused({})
    ],
)
def test_build_refuses_a_row_it_cannot_read(app, make_message, column, value):
    row = make_message()
    setattr(row, column, value)
    with pytest.raises(sender.BuildError):
        sender.build(row, [])


REFUSED_FOR_GOOD = {"a@example.com": (550, b"5.1.1 no such user"), "b@example.com": (553, b"no")}
REFUSED_FOR_NOW = {"a@example.com": (550, b"5.1.1 no such user"), "b@example.com": (452, b"full")}


@pytest.mark.parametrize(
    ("error", "outcome", "code"),
    [
        (smtplib.SMTPDataError(451, b"4.7.1 try again later"), DEFERRED, 451),
        (smtplib.SMTPSenderRefused(450, b"4.2.0 busy", "outbox@example.com"), DEFERRED, 450),
        (smtplib.SMTPResponseException(421, b"4.3.2 closing"), DEFERRED, 421),
        (smtplib.SMTPDataError(550, b"5.7.1 message refused"), FAILED, 550),
        (smtplib.SMTPSenderRefused(553, b"5.1.8 bad sender", "x"), FAILED, 553),
        (TimeoutError("timed out"), DEFERRED, None),
        (ConnectionRefusedError(111, "Connection refused"), DEFERRED, None),
        (ConnectionResetError(104, "Connection reset by peer"), DEFERRED, None),
        (smtplib.SMTPServerDisconnected("Connection unexpectedly closed"), DEFERRED, None),
        (smtplib.SMTPRecipientsRefused(REFUSED_FOR_GOOD), FAILED, 553),
        (smtplib.SMTPRecipientsRefused(REFUSED_FOR_NOW), DEFERRED, 452),
        (ValueError("bad value"), FAILED, None),
        (UnicodeEncodeError("ascii", "é", 0, 1, "ordinal not in range"), FAILED, None),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_classify_defers_transient_errors_and_fails_permanent_ones(error, outcome, code):
    result = sender.classify(error)
    assert (result.outcome, result.code) == (outcome, code)


def test_classify_keeps_what_the_server_said():
    assert sender.classify(smtplib.SMTPDataError(451, b"4.7.1 try again later")).error == (
        "451 4.7.1 try again later"
    )
    refused = sender.classify(smtplib.SMTPRecipientsRefused(REFUSED_FOR_NOW)).error
    assert "a@example.com: 550 5.1.1 no such user" in refused
    assert "b@example.com: 452 full" in refused
    assert "bad value" in sender.classify(ValueError("bad value")).error


def test_one_connection_carries_a_whole_batch(smtp_app, smtp, make_message):
    rows = [stored(make_message) for _ in range(3)]
    assert send(*rows) == [sender.Result(SENT)] * 3
    assert smtp.recorder.connections == 1
    assert smtp.recorder.message_ids() == [row.message_id for row in rows]


def test_a_connection_closed_by_421_to_rcpt_is_not_reused(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies["closing@example.com"] = "421 4.3.2 shutting down"
    first, second = stored(make_message, to="closing@example.com"), stored(make_message)
    results = send(first, second)
    assert [(r.outcome, r.code) for r in results] == [(DEFERRED, 421), (SENT, None)]
    assert smtp.recorder.message_ids() == [second.message_id]
    assert smtp.recorder.connections == 2


def test_a_refused_data_command_leaves_the_connection_ready(smtp_app, smtp, make_message):
    # smtplib sends no RSET when the DATA command itself is refused.
    smtp.recorder.data_command_replies.append("451 4.7.1 greylisted, try again later")
    first, second = stored(make_message), stored(make_message)
    results = send(first, second)
    assert [(r.outcome, r.code) for r in results] == [(DEFERRED, 451), (SENT, None)]
    assert smtp.recorder.message_ids() == [second.message_id]
