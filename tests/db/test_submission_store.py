"""Mails handed over raw: queue_raw stores them as they came, or refuses them
naming the problem with nothing stored, and a worker sends the stored bytes to a real
SMTP server unchanged but for what outbox adds on top (Message-ID, Date) or takes out (Bcc)."""

import email
import email.policy
from datetime import timedelta

import pytest
import sqlalchemy as sa

from outbox import queue
from outbox.capabilities import retention, suppression
from outbox.capabilities.bounces import store as bounces
from outbox.capabilities.bounces import verp
from outbox.capabilities.submission import Queued, Refused, queue_raw
from outbox.capabilities.submission.raw import RawMail
from outbox.mail.rendered import Features
from outbox.models import BounceMail, Message, RawChunk, utcnow
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support import bouncemail
from tests.support.dkimkeys import published, verifies
from tests.support.wire import aiosmtpd_server

pytestmark = pytest.mark.all_databases

SOURCE = "smtp:app"
HEAD = (
    b"From: Ann Example <ann@example.com>\r\n"
    b"To: Bob <bob@example.com>, carl@example.net\r\n"
    b"Cc: =?utf-8?q?D=C3=B6rte?= <doerte@example.org>\r\n"
    b"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?= from\r\n the app\r\n"
    b"Date: Tue, 24 Nov 2026 12:00:00 +0000\r\n"
    b"Message-ID: <kept.1@app.example.com>\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Transfer-Encoding: 8bit\r\n"
)
BODY = (
    b"Gr\xc3\xbc\xc3\x9fe,\r\n"
    b".a line that starts with a dot\r\n"
    b".\r\n" + b"x" * 998 + b"\r\n" + b"  trailing spaces kept  \r\n\r\n\r\n"
)
EVERYTHING = Features(eight_bit=True, smtputf8=True)
RCPTS = ["bob@example.com", "carl@example.net", "doerte@example.org", "hidden@example.com"]


def stored_rows() -> int:
    return db.session.scalar(sa.select(sa.func.count()).select_from(Message)) or 0


def sent(app, data: bytes, recipients=RCPTS, offers=EVERYTHING):  # type: ignore[no-untyped-def]
    """The mail queued raw, then sent by a worker to an aiosmtpd server offering offers."""
    queued = queue_raw("bounces@example.com", recipients, data, source=SOURCE)
    with aiosmtpd_server(offers) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        assert Worker().drain() == Tally(sent=1)
        (got,) = server.received()
    return queued, got


def test_a_raw_mail_goes_out_byte_for_byte_to_the_envelope_recipients(app):
    data = HEAD + b"Bcc: hidden@example.com,\r\n  also@example.com\r\n\r\n" + BODY
    queued, got = sent(app, data)
    assert got.content == HEAD + b"\r\n" + BODY  # the Bcc field and nothing else taken out
    assert got.mail_from == "bounces@example.com"
    assert got.rcpt_tos == RCPTS
    row = db.session.get(Message, queued.id)
    assert row is not None and row.status == "sent"
    assert (row.message_id, queued.message_id) == ("<kept.1@app.example.com>",) * 2
    assert (row.from_addr, row.from_name, row.source) == ("ann@example.com", "Ann Example", SOURCE)
    assert row.subject == "Grüße from the app"
    assert [(e["kind"], e["address"], e.get("name")) for e in row.recipients] == [
        ("to", "bob@example.com", "Bob"),
        ("to", "carl@example.net", None),
        ("cc", "doerte@example.org", "Dörte"),
        ("bcc", "hidden@example.com", None),
    ]
    assert row.envelope_from == "bounces@example.com"


def test_a_mail_without_message_id_or_date_gets_them_on_top_and_keeps_its_own_bytes(app):
    data = b"From: ann@example.com\r\nSubject: hi\r\n\r\nbody\r\n"
    queued, got = sent(app, data)
    lines = got.content.split(b"\r\n")
    assert lines[0] == f"Message-ID: {queued.message_id}".encode()
    assert queued.message_id.endswith("@example.com>")
    assert lines[1].startswith(b"Date: ") and lines[1].endswith(b" +0000")
    assert b"\r\n".join(lines[2:]) == data
    parsed = email.message_from_bytes(got.content, policy=email.policy.default)
    assert parsed["Date"].datetime is not None


def test_data_without_a_final_crlf_is_ended_with_one(app):
    _, got = sent(app, b"From: ann@example.com\r\n\r\nlast line")
    assert got.content.endswith(b"\r\n\r\nlast line\r\n")


def test_a_mail_over_a_chunk_is_stored_in_chunks_and_read_back_whole(app):
    body = b"".join(b"%07d " % n + b"y" * 990 + b"\r\n" for n in range(1500))  # 1.5 MB
    queued, got = sent(app, b"From: ann@example.com\r\n\r\n" + body)
    assert got.content.endswith(body)
    chunks = db.session.scalar(sa.select(sa.func.count()).where(RawChunk.message_pk == queued.id))
    assert chunks == 2


def test_an_8bit_mail_to_a_server_without_8bitmime_goes_quoted_printable(app):
    data = HEAD + b"\r\n" + BODY
    _, got = sent(app, data, offers=Features(eight_bit=False, smtputf8=False))
    assert got.content.isascii()
    parsed = email.message_from_bytes(got.content, policy=email.policy.default)
    assert parsed["Content-Transfer-Encoding"] == "quoted-printable"
    assert parsed.get_content().replace("\r\n", "\n") == BODY.decode().replace("\r\n", "\n")
    assert parsed["Message-ID"] == "<kept.1@app.example.com>"


def test_a_utf8_header_needs_smtputf8_and_fails_naming_it_without(app):
    data = "From: Jörg <jörg@bücher.example>\r\n\r\nhi\r\n".encode()
    queued = queue_raw("jörg@bücher.example", ["ann@example.com"], data, source=SOURCE)
    with aiosmtpd_server(Features(eight_bit=True, smtputf8=False)) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        assert Worker().drain() == Tally(failed=1)
        assert server.received() == []
    row = db.session.get(Message, queued.id)
    assert row is not None and "SMTPUTF8" in (row.last_error or "")
    _, got = sent(app, data.replace(b"hi", b"again"), ["ann@example.com"])
    assert got.content.endswith(b"again\r\n")


def test_the_same_mail_handed_over_twice_is_queued_once(app):
    data = HEAD + b"\r\n" + BODY
    first = queue_raw("bounces@example.com", RCPTS, data, source=SOURCE)
    again = queue_raw("bounces@example.com", RCPTS, data, source=SOURCE)
    assert again == first and stored_rows() == 1
    with pytest.raises(Refused) as refused:
        queue_raw("bounces@example.com", RCPTS, data + b"changed\r\n", source=SOURCE)
    assert "<kept.1@app.example.com> was queued already" in refused.value.reply()
    assert stored_rows() == 1


def test_the_parts_of_a_split_delivery_are_queued_each_recipient_once(app):
    data = HEAD + b"\r\n" + BODY
    first = queue_raw("bounces@example.com", RCPTS[:2], data, source=SOURCE)
    # The rest, with one recipient named again (a relay that grouped its retry otherwise).
    rest = queue_raw("bounces@example.com", ["carl@EXAMPLE.net", *RCPTS[2:]], data, source=SOURCE)
    assert rest.id != first.id and rest.message_id == first.message_id
    row = db.session.get_one(Message, rest.id)
    assert [e["address"] for e in row.recipients] == RCPTS[2:]
    assert queue_raw("bounces@example.com", RCPTS[1::-1], data, source=SOURCE) == first  # retry
    assert queue_raw("bounces@example.com", RCPTS, data, source=SOURCE) == first  # all queued
    assert stored_rows() == 2
    with pytest.raises(Refused) as refused:  # the same bytes from another token
        queue_raw("bounces@example.com", ["new@example.com"], data, source="smtp:other")
    assert refused.value.code == 554 and stored_rows() == 2


def test_a_bounce_matched_by_message_id_finds_the_part_sent_to_its_recipient(app):
    data = HEAD + b"\r\n" + BODY
    queue_raw("bounces@example.com", RCPTS[:2], data, source=SOURCE)
    part = queue_raw("bounces@example.com", RCPTS[2:], data, source=SOURCE)
    with aiosmtpd_server(EVERYTHING) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        assert Worker().drain() == Tally(sent=2)
    bounced = bouncemail.postfix("bounces@example.com", RCPTS[3], part.message_id)
    mail = db.session.get_one(BounceMail, bounces.take_in(bounced, "smtp"))
    assert (mail.message_pk, mail.matched_by, mail.note) == (part.id, "message-id", None)
    row = db.session.get_one(Message, part.id)
    assert [e.get("state") for e in row.recipients][1] == "bounced"


def test_the_message_page_links_the_other_parts_and_names_the_null_sender(app, signed_in):
    data = HEAD + b"\r\n" + BODY
    first = queue_raw("", RCPTS[:2], data, source=SOURCE)
    rest = queue_raw("", RCPTS[2:], data, source=SOURCE)
    for shown, other in ((first, rest), (rest, first)):
        page = signed_in.get(f"/messages/{shown.id}").get_data(as_text=True)
        assert f'also of <a href="/messages/{other.id}">#{other.id}</a>' in page
        assert "null sender (<code>MAIL FROM:&lt;&gt;</code>)" in page


LONG = b"z" * 999
REFUSED = [
    (b"From: a@example.com\r\n\r\nnul \0 here\r\n", "554 5.6.0 line 3 holds a NUL byte"),
    (b"From: a@example.com\r\n\r\nbare\rCR\r\n", "554 5.6.0 line 3 ends with a bare CR"),
    (b"From: a@example.com\r\n\r\n" + LONG + b"\rCR\r\n", "554 5.6.0 line 3 ends with a bare CR"),
    (b"From: a@example.com\r\nX-Token: " + LONG + b"\r\n\r\nx\r\n", "the X-Token field cannot"),
    (b"From: a@example.com\r\nnot a header\r\n\r\nx\r\n", "header line 2 is not a field"),
    (b"From: a@example.com\r\nBcc : b@example.com\r\nX\r\n", "header line 3 is not a field"),
    (b"\r\nbody only\r\n", "no header fields"),
    (b"Subject: no sender\r\n\r\nx\r\n", "no From field"),
    (b"From: a@example.com\r\nFrom: b@example.com\r\n\r\nx\r\n", "2 From fields"),
    (b"From: nobody\r\n\r\nx\r\n", "From: 'nobody' is not an email address"),
    (b"From: a@example.com\r\nSubject: caf\xe9\r\n\r\nx\r\n", "not UTF-8 (RFC 6532)"),
    (b"From: a@example.com\r\nMessage-ID: <" + b"m" * 300 + b"@x>\r\n\r\nx\r\n", "over 255"),
]


@pytest.mark.parametrize(("data", "reply"), REFUSED)
def test_a_mail_smtp_or_rfc_5322_forbids_is_refused_naming_the_problem(app, data, reply):
    with pytest.raises(Refused) as refused:
        queue_raw("a@example.com", ["b@example.com"], data, source=SOURCE)
    assert reply in refused.value.reply()
    assert refused.value.code // 100 == 5
    assert stored_rows() == 0


ENVELOPES = [
    ("not an address", ["b@example.com"], "553 5.1.7 MAIL FROM <not an address>: 'not an addr"),
    ("a@example.com", ["b@example.com", "b@@example.com"], "553 5.1.3 RCPT TO <b@@example"),
    ("a@example.com", ["Bob <b@example.com>"], "553 5.1.3 RCPT TO: 'Bob <b@example.com>' is"),
    ("a@example.com", ["b@localhost"], "553 5.1.3 RCPT TO <b@localhost>: "),
    ("a@example.com", [], "554 5.5.1 no recipients"),
]


@pytest.mark.parametrize(("sender", "recipients", "reply"), ENVELOPES)
def test_a_malformed_envelope_is_refused_naming_the_address(app, sender, recipients, reply):
    with pytest.raises(Refused) as refused:
        queue_raw(sender, recipients, b"From: a@example.com\r\n\r\nx\r\n", source=SOURCE)
    assert refused.value.reply().startswith(reply)
    assert stored_rows() == 0


def test_a_mail_over_the_size_limit_is_refused_with_552(app):
    app.config["MAX_MESSAGE_BYTES"] = 1000
    data = b"From: a@example.com\r\n\r\n" + b"x" * 500 + b"\r\n" + b"y" * 500 + b"\r\n"
    with pytest.raises(Refused) as refused:
        queue_raw("a@example.com", ["b@example.com"], data, source=SOURCE)
    assert refused.value.reply().startswith("552 5.3.4 ")
    assert "OUTBOX_MAX_MESSAGE_BYTES" in refused.value.text
    assert stored_rows() == 0


def test_a_998_octet_line_and_an_idn_recipient_are_taken(app):
    data = b"From: a@example.com\r\n\r\n" + b"z" * 998 + b"\r\n"
    queued, got = sent(app, data, ["ann@bücher.example"], offers=Features(True, False))
    assert got.rcpt_tos == ["ann@xn--bcher-kva.example"]
    assert isinstance(queued, Queued) and got.content.endswith(data)


def test_a_raw_mail_made_for_a_server_without_8bitmime_is_the_same_mail():
    mail = RawMail("a@example.com", ["b@example.com"], HEAD + b"\r\n" + BODY)
    plain = mail.for_server(Features())
    assert not plain.data.eight_bit
    (written,) = plain.data.texts
    parsed = email.message_from_bytes(written, policy=email.policy.default)
    assert parsed.get_content().replace("\r\n", "\n") == BODY.decode().replace("\r\n", "\n")
    assert mail.for_server(Features(eight_bit=True)).data.texts == [HEAD + b"\r\n" + BODY]


def test_retention_drops_a_raw_mails_bytes_with_its_bodies_and_then_the_row(app):
    queued, _ = sent(app, HEAD + b"\r\n" + BODY)
    later = utcnow() + timedelta(days=app.config["RETENTION_BODY_DAYS"] + 1)
    assert retention.purge(later).bodies_dropped == 1
    assert db.session.scalar(sa.select(sa.func.count()).select_from(RawChunk)) == 0
    assert db.session.get(Message, queued.id) is not None
    assert retention.purge(later + timedelta(days=app.config["RETENTION_DAYS"])).messages == 1
    assert stored_rows() == 0


MULTIPART = (
    b"From: ann@example.com\r\nTo: bob@example.com\r\nSubject: report\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="b1"\r\n\r\n'
    b'--b1\r\nContent-Type: multipart/alternative; boundary="b2"\r\n\r\n'
    b"--b2\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
    b"Plain words, gr\xc3\xbc\xc3\x9fe\r\n"
    b"--b2\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>HTML words</p>\r\n--b2--\r\n"
    b'--b1\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename="r.pdf"'
    b"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n--b1--\r\n"
)


def test_the_message_page_shows_a_raw_mail_and_offers_its_bytes(app, signed_in):
    queued = queue_raw("ann@example.com", ["bob@example.com"], MULTIPART, source=SOURCE)
    page = signed_in.get(f"/messages/{queued.id}").get_data(as_text=True)
    assert "Plain words, grüße" in page and "by smtp:app" in page
    assert "r.pdf" in page and "application/pdf" in page
    assert f"/messages/{queued.id}/mail.eml" in page
    html = signed_in.get(f"/messages/{queued.id}/body.html").get_data(as_text=True)
    assert "<p>HTML words</p>" in html
    eml = signed_in.get(f"/messages/{queued.id}/mail.eml")
    assert eml.status_code == 200 and eml.mimetype == "message/rfc822"
    assert eml.data.endswith(MULTIPART) and eml.data.startswith(b"Message-ID: ")
    assert signed_in.get(f"/messages/{queued.id + 1}/mail.eml").status_code == 404


def test_send_again_queues_the_same_bytes_under_a_new_message_id_to_everyone(app):
    data = HEAD + b"Bcc: hidden@example.com\r\n\r\n" + BODY
    first, _ = sent(app, data)
    copy = queue.send_again(first.id, "staff:ann", 5)
    assert (copy.resent_from, copy.max_attempts, copy.source) == (first.id, 5, "staff:ann")
    assert copy.message_id != first.message_id
    with aiosmtpd_server(EVERYTHING) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        assert Worker().drain() == Tally(sent=1)
        (got,) = server.received()
    assert got.rcpt_tos == RCPTS
    assert (
        got.content
        == f"Message-ID: {copy.message_id}\r\n".encode()
        + HEAD.replace(b"Message-ID: <kept.1@app.example.com>\r\n", b"")
        + b"\r\n"
        + BODY
    )


def test_a_raw_mail_is_dkim_signed_over_the_bytes_sent_and_verifies(app, runner):
    result = runner.invoke(args=["dkim", "add", "example.com", "--selector", "s1"])
    assert result.exit_code == 0, result.output
    records = published(result.output)
    data = HEAD + b"\r\n" + BODY
    _, got = sent(app, data)
    assert got.content.startswith(b"DKIM-Signature: ") and got.content.endswith(data)
    assert verifies(got.content, records)
    _, plain = sent(app, data.replace(b"kept.1", b"kept.2"), offers=Features())
    assert plain.content.isascii() and verifies(plain.content, records)


def test_with_verp_each_recipient_of_a_raw_mail_gets_its_own_return_path(app):
    app.config["BOUNCE_ADDRESS"] = "bounces@example.com"
    queued, _ = sent(app, HEAD + b"\r\n" + BODY, RCPTS[:1])
    with aiosmtpd_server(EVERYTHING) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        data = HEAD.replace(b"kept.1", b"kept.3") + b"\r\n" + BODY
        second = queue_raw("app@example.com", RCPTS[:2], data, source=SOURCE)
        assert Worker().drain() == Tally(sent=1)
        got = server.received()
    assert [g.rcpt_tos for g in got] == [RCPTS[:1], RCPTS[1:2]]
    targets = [verp.target(g.mail_from, "bounces@example.com", app.secret_key) for g in got]
    assert targets == [verp.Target(second.id, 0), verp.Target(second.id, 1)]
    assert queued.id != second.id


def test_a_suppressed_recipient_of_a_raw_mail_is_never_sent_to(app):
    suppression.add("carl@example.net", "hard bounce", "manual")
    db.session.commit()
    queued, got = sent(app, HEAD + b"\r\n" + BODY)
    assert "carl@example.net" not in got.rcpt_tos and len(got.rcpt_tos) == 3
    row = db.session.get(Message, queued.id)
    assert row is not None
    assert [e.get("state") for e in row.recipients if e["address"] == "carl@example.net"] == [
        "suppressed"
    ]
    app.config["SUPPRESSED"] = "reject"
    with pytest.raises(Refused) as refused:
        queue_raw("a@example.com", ["carl@example.net"], b"From: a@example.com\r\n\r\nx\r\n",
                  source=SOURCE)  # fmt: skip
    assert refused.value.reply().startswith("550 5.7.1 on the suppression list: carl@example.net")
