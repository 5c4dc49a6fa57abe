"""Building mails from stored rows, sorting SMTP errors, and keeping one connection healthy."""

import base64
import email
import email.policy
import os
import smtplib
import tracemalloc

import pytest

from outbox import queue
from outbox.core.checks import Upload
from outbox.core.deliveries import Reply
from outbox.core.drafts import build_draft
from outbox.core.status import Outcome
from outbox.mail import encoding, mime, rendered
from outbox.smtp import replies
from outbox.worker import sender
from tests.support.sink import Sink
from tests.support.smtpd import free_port

DEFERRED, FAILED, SENT = Outcome.DEFERRED, Outcome.FAILED, Outcome.SENT


def stored(make_message, **fields):  # type: ignore[no-untyped-def]
    """A message queued from fields exactly as the API checks and stores them."""
    fields = {"from": "outbox@example.com", "to": "rcpt@example.com", "text": "Hi", **fields}
    return make_message(**vars(build_draft(fields, None)))


def send(*rows, ahead: bool = False) -> list[sender.Result]:  # type: ignore[no-untyped-def]
    """Build and deliver rows in turn over one session, as a worker's batch does.

    ahead: each mail's MAIL, RCPT and DATA go out with the end of the one before, as
    the worker sends mails without attachments.
    """
    mails = [mime.prepare(row, queue.read_attachments(row.id)) for row in rows]
    followers = [*mails[1:], None] if ahead else [None] * len(mails)
    with sender.SmtpSession() as session:
        return [
            sender.deliver(session, mail, None, following)
            for mail, following in zip(mails, followers, strict=True)
        ]


def wired(row, attachments=()) -> rendered.Prepared:  # type: ignore[no-untyped-def]
    """A row's mail as it goes to a server that offers neither 8BITMIME nor SMTPUTF8."""
    return mime.prepare(row, list(attachments)).for_server(rendered.Features())


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
    assert [r.outcome for r in send(row)] == [SENT]

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
    assert [r.outcome for r in send(row)] == [SENT]
    content = smtp.received[0].content
    # Folded, encoded words of at most 75 characters (RFC 2047 2).
    assert all(len(line) <= 78 for line in content.split(b"\r\n\r\n")[0].split(b"\r\n"))
    mail = email.message_from_bytes(content, policy=email.policy.default)
    assert addresses(mail, "To") == {(f"Doe, Jane {n}", f"jane{n}@example.com") for n in range(6)}
    assert mail["Subject"] == "Grüße aus Köln, " * 12
    assert mail["X-Campaign"] == " – ".join(["Frühling"] * 10)
    assert mail["X-Plain"] == " ".join(["spring"] * 20)
    boundaries = {part.get_boundary() for part in mail.walk() if part.is_multipart()}
    assert len(boundaries) == 1 and all(b.startswith("=_") for b in boundaries)  # alternative


def test_an_html_only_message_is_one_html_part(smtp_app, smtp, make_message):
    row = stored(make_message, text=None, html="<b>only</b>")
    assert [r.outcome for r in send(row)] == [SENT]
    mail = email.message_from_bytes(smtp.received[0].content, policy=email.policy.default)
    assert mail.get_content_type() == "text/html"  # no empty text/plain beside it
    assert mail.get_body(("html",)).get_content().strip() == "<b>only</b>"
    assert mail.get_body(("plain",)) is None


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("subject", "Hello\r\nBcc: victim@example.com"),
        ("recipients", [{"kind": "to", "address": "rcpt@example.com\r\nBcc: victim@example.com"}]),
        (
            "recipients",
            [
                {"kind": "to", "address": "rcpt@example.com"},
                {"kind": "cc", "address": "copy@example.com\r\nBcc: victim@example.com"},
            ],
        ),
        ("recipients", [{"kind": "to", "address": "rcpt@example.com", "name": "A\r\nBcc: v@x"}]),
        ("from_name", "Shop\r\nBcc: victim@example.com"),
        ("reply_to", "help@example.com\nBcc: victim@example.com"),
        ("headers", {"X-Campaign": "spring\r\nBcc: victim@example.com"}),
        ("headers", {"X-Campaign\r\nBcc": "victim@example.com"}),
    ],
)
def test_build_refuses_a_row_whose_header_holds_a_line_break(app, make_message, column, value):
    row = make_message()
    setattr(row, column, value)
    with pytest.raises(mime.BuildError, match="line break"):
        mime.prepare(row, [])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("headers", ["X-Campaign", "spring"]),
        ("from_addr", ""),
        ("recipients", []),  # smtplib would raise SMTPRecipientsRefused({})
    ],
)
def test_build_refuses_a_row_it_cannot_read(app, make_message, column, value):
    row = make_message()
    setattr(row, column, value)
    with pytest.raises(mime.BuildError):
        mime.prepare(row, [])


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
    result = replies.classify(error)
    assert (result.outcome, result.code) == (outcome, code)


def test_classify_keeps_what_the_server_said():
    assert replies.classify(smtplib.SMTPDataError(451, b"4.7.1 try again later")).error == (
        "451 4.7.1 try again later"
    )
    refused = replies.classify(smtplib.SMTPRecipientsRefused(REFUSED_FOR_NOW)).error
    assert "a@example.com: 550 5.1.1 no such user" in refused
    assert "b@example.com: 452 full" in refused
    assert "bad value" in replies.classify(ValueError("bad value")).error


def test_one_connection_carries_a_whole_batch(smtp_app, smtp, make_message):
    rows = [stored(make_message) for _ in range(3)]
    assert [r.outcome for r in send(*rows)] == [SENT] * 3
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


def test_the_next_mail_goes_out_with_the_end_of_the_one_before(smtp_app, smtp, make_message):
    rows = [stored(make_message, subject=f"m{n}") for n in range(4)]
    mails = [mime.prepare(row, []) for row in rows]
    with sender.SmtpSession() as session:
        assert sender.deliver(session, mails[0], None, mails[1]).outcome is SENT
        assert session.ahead is mails[1]  # its MAIL, RCPT and DATA are on their way
        assert sender.deliver(session, mails[1], None, mails[2]).outcome is SENT
        assert session.ahead is mails[2]
        # Another mail than the one sent ahead: the server waits for that one's content,
        # so the connection is dropped and made anew, and the mail sent ahead never goes.
        assert sender.deliver(session, mails[3]).outcome is SENT
        assert session.ahead is None
    assert smtp.recorder.message_ids() == [rows[n].message_id for n in (0, 1, 3)]
    assert smtp.recorder.connections == 2


@pytest.mark.parametrize(
    ("pipelining", "ahead"),
    [(True, True), (True, False), (False, True), (False, False)],
    ids=["each mail sent ahead", "pipelined", "in lockstep (ahead refused)", "in lockstep"],
)
def test_refusals_are_sorted_alike_with_and_without_pipelining(
    smtp_app, smtp, make_message, pipelining, ahead
):  # type: ignore[no-untyped-def]
    recorder = smtp.recorder
    recorder.pipelining = pipelining
    recorder.mail_replies["banned@example.com"] = "550 5.7.1 sender refused"
    recorder.rcpt_replies.update({"gone@example.com": "550 5.1.1 no such user",
                                  "full@example.com": "452 4.2.2 mailbox full",
                                  "closing@example.com": "421 4.3.2 shutting down"})  # fmt: skip
    recorder.data_command_replies.append("451 4.7.1 greylisted")
    with sender.SmtpSession() as session:
        host = session.host()
        host.ehlo_or_helo_if_needed()
        assert host.has_extn("pipelining") is pipelining
    rows = [
        stored(make_message),  # its DATA command is refused (the first DATA command sent)
        stored(make_message, **{"from": "banned@example.com"}),
        stored(make_message, to=["gone@example.com", "full@example.com"]),
        stored(make_message, to=["gone@example.com", "here@example.com"]),
        stored(make_message, to=["here@example.com", "closing@example.com"]),
        stored(make_message),
    ]
    results = send(*rows, ahead=ahead)
    assert [(r.outcome, r.code) for r in results] == [
        (DEFERRED, 451), (FAILED, 550), (DEFERRED, 452), (SENT, None), (DEFERRED, 421),
        (SENT, None),
    ]  # fmt: skip
    assert results[1].error == "550 5.7.1 sender refused"
    said, refusals = results[2].error.split(": ", 1)  # recipients in no fixed order
    assert said == "all recipients refused"
    assert set(refusals.split("; ")) == {
        "gone@example.com: 550 5.1.1 no such user",
        "full@example.com: 452 4.2.2 mailbox full",
    }
    assert results[3].recipients == {
        "gone@example.com": Reply(FAILED, 550, "5.1.1 no such user"),
        "here@example.com": Reply(SENT, 250, ""),
    }
    assert recorder.message_ids() == [rows[3].message_id, rows[5].message_id]
    assert recorder.received[0].rcpt_tos == ["here@example.com"]
    assert recorder.connections == 1 + 2  # the check above, then a new one after the 421 only


MIB = 1024 * 1024


def attached(make_message, *bodies: bytes, **fields):  # type: ignore[no-untyped-def]
    """A queued message carrying bodies as attachments."""
    uploads = [Upload(f"part-{n}.bin", "application/octet-stream", b) for n, b in enumerate(bodies)]
    return make_message(attachments=uploads, **fields)


def attachments_of(content: bytes) -> list[bytes]:
    mail = email.message_from_bytes(content, policy=email.policy.default)
    return [part.get_payload(decode=True) for part in mail.iter_attachments()]


def test_large_attachments_arrive_byte_for_byte(smtp_app, smtp, make_message):
    # Across several encoding blocks, and one ending a block then one byte into the next.
    bodies = [os.urandom(3 * MIB), os.urandom(encoding.BLOCK_BYTES * 2 + 58), b"", b"x"]
    assert len(bodies[1]) % 57 != 0
    row = attached(make_message, *bodies, html="<p>Hello</p>")
    assert [r.outcome for r in send(row)] == [SENT]
    content = smtp.received[0].content
    assert attachments_of(content) == bodies
    body = content.split(b"\r\n\r\n", 1)[1]  # past the headers (an unfoldable Message-ID)
    assert max(len(line) for line in body.split(b"\r\n")) == 76


def test_the_data_holds_each_attachment_whole_and_its_size_is_counted(app, make_message):
    block = encoding.BLOCK_BYTES
    sizes = [0, 1, 56, 57, 58, block - 1, block, block + 1, 3 * block + 100]
    bodies = list(map(os.urandom, sizes))
    row = attached(make_message, *bodies, html="<p>Hello</p>")
    data = wired(row, queue.read_attachments(row.id)).data
    content = b"".join(data.pieces())
    assert attachments_of(content) == bodies
    assert data.size() == len(content)


DOTTED = ".\n..\n.hi\n..there\nend\n. .\n."


@pytest.mark.parametrize("html", [None, DOTTED], ids=["text only", "with html"])
def test_lines_that_start_with_a_dot_arrive_intact(smtp_app, smtp, make_message, html):
    # Unstuffed, the lone "." would end the data early and ".." would lose a dot.
    bodies = [os.urandom(1000)] if html else []
    row = attached(make_message, *bodies, text=DOTTED, html=html)
    assert [r.outcome for r in send(row)] == [SENT]
    mail = email.message_from_bytes(smtp.received[0].content, policy=email.policy.default)
    for kind in ("plain", "html") if html else ("plain",):
        assert mail.get_body((kind,)).get_content().replace("\r\n", "\n").rstrip("\n") == DOTTED
        assert attachments_of(smtp.received[0].content) == bodies


@pytest.mark.parametrize("ahead", [False, True], ids=["one by one", "each mail sent ahead"])
def test_a_refusal_after_the_data_is_sorted_and_the_session_goes_on(
    smtp_app, smtp, make_message, ahead
):  # type: ignore[no-untyped-def]
    smtp.recorder.data_replies.extend(["554 5.6.0 message refused", "451 4.3.0 try again later"])
    bodies = [os.urandom(MIB + 1)]
    rows = [attached(make_message, *bodies) for _ in range(3)]
    results = send(*rows, ahead=ahead)
    assert [(r.outcome, r.code) for r in results] == [(FAILED, 554), (DEFERRED, 451), (SENT, None)]
    assert results[0].error == "554 5.6.0 message refused"
    assert smtp.recorder.connections == 1
    assert [attachments_of(r.content) for r in smtp.recorder.refused] == [bodies, bodies]
    assert smtp.recorder.message_ids() == [rows[2].message_id]


def test_a_partly_refused_message_is_sent_to_the_rest(smtp_app, smtp, make_message):
    smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.1.1 no such user"
    row = attached(make_message, os.urandom(1000), to=["gone@example.com", "here@example.com"])
    (result,) = send(row)
    assert (result.outcome, result.code) == (SENT, None)
    assert result.recipients == {
        "gone@example.com": Reply(FAILED, 550, "5.1.1 no such user"),
        "here@example.com": Reply(SENT, 250, ""),
    }
    assert smtp.received[0].rcpt_tos == ["here@example.com"]


def test_a_large_attachment_is_held_about_once_on_its_way_out(app, make_message, tmp_path):
    # The sink runs in its own process, so only the reading, rendering and sending
    # are traced here. Fetched whole and joined, then encoded by the email package
    # and copied by smtplib, an 8 MiB attachment had 70 MiB traced at the peak. Now
    # the peak is its read: the buffer grows by an eighth, and a chunk is in flight.
    size = 8 * MIB
    row = attached(make_message, os.urandom(size))
    sink = Sink(free_port(), tmp_path / "received.txt").start()
    app.config["MAIL_PORT"] = app.extensions["mail"].port = sink.port
    try:
        tracemalloc.start()
        try:
            assert [r.outcome for r in send(row)] == [SENT]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sink.wait_for(1, timeout=10)
    finally:
        sink.stop()
    assert sink.message_ids() == {row.message_id: 1}
    assert peak < 1.6 * size, f"{peak / MIB:.1f} MiB at the peak"
