"""The mail a row makes, read back by the email package: no defects, nothing changed."""

import re
from types import SimpleNamespace
from typing import Any

import idna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox.core.checks import Upload
from outbox.mail import feedback_id, mime
from outbox.mail.rendered import Features
from outbox.queue.store import msgid_domain
from tests.support.mailcheck import (
    FILES,
    MSG_ID,
    ROWS,
    check,
    long_lines,
    make_row,
    parsed,
)

PLAIN, EIGHT, UTF8 = Features(), Features(eight_bit=True), Features(True, True)


def data_of(row: SimpleNamespace, attachments: list[Any] | None = None, features=PLAIN) -> bytes:  # type: ignore[no-untyped-def]
    prepared = mime.prepare(row, attachments or []).for_server(features)
    return b"".join(prepared.data.pieces())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=ROWS,
    attachments=FILES,
    features=st.sampled_from([PLAIN, EIGHT, UTF8]),
)
def test_every_mail_reads_back_as_it_was_stored(fields, attachments, features) -> None:  # type: ignore[no-untyped-def]
    row = SimpleNamespace(**fields)
    prepared = mime.prepare(row, attachments).for_server(features)
    data = b"".join(prepared.data.pieces())
    assert prepared.data.size() == len(data)
    if not features.eight_bit:
        assert data.isascii() or features.smtputf8
    assert prepared.data.eight_bit == (not data.isascii() and features.eight_bit)
    check(data, row, attachments, features.smtputf8)


def test_no_line_passes_998_octets_for_the_longest_values_the_api_takes() -> None:
    row = make_row(
        subject="x" * 998, from_name="N" * 998, text_body="y" * 2000 + "\n" + "中" * 1500,
        html_body="<p>" * 17000, headers={"X-Long": "u" * 5000, "X-Words": "ab " * 2000},
    )  # fmt: skip
    longest_id = "c" * 125 + "@" + "d" * 124
    files = [Upload("n" * 255 + ".txt", "text/plain", b"z"),
             Upload("i" * 255 + ".png", "image/png", b"png", longest_id)]  # fmt: skip
    data = data_of(row, files)
    assert long_lines(data) == []
    headers = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert [len(line) for line in headers if len(line) > 78] == []  # encoded where needed
    check(data, row, files, False)


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("plain ascii\n", b"7bit"),
        ("x" * 2000, b"quoted-printable"),  # a long line
        ("Grüße aus Köln, alles gut.\n", b"quoted-printable"),  # mostly ASCII, no 8BITMIME
        ("中文" * 1500, b"base64"),  # CJK: base64 is shorter
        ("no final line break", b"quoted-printable"),  # SMTP would add one
    ],
)
def test_each_part_gets_the_smallest_encoding_that_keeps_it(text, encoding) -> None:  # type: ignore[no-untyped-def]
    data = data_of(make_row(text_body=text))
    assert b"Content-Transfer-Encoding: " + encoding + b"\r\n" in data
    check(data, make_row(text_body=text), [], False)


def test_eight_bit_goes_only_to_a_server_that_offers_8bitmime() -> None:
    row = make_row(text_body="Grüße\n", html_body="<p>Grüße</p>")
    plain = mime.prepare(row, []).for_server(PLAIN)
    assert not plain.data.eight_bit and b"".join(plain.data.pieces()).isascii()
    eight = mime.prepare(row, []).for_server(EIGHT)
    assert eight.data.eight_bit
    assert b"Content-Transfer-Encoding: 8bit\r\n\r\nGr\xc3\xbc\xc3\x9fe" in b"".join(
        eight.data.pieces()
    )
    long = mime.prepare(make_row(text_body="é" * 600), []).for_server(EIGHT)  # 1,200 octets
    assert not long.data.eight_bit


def test_domains_go_as_idna2008_a_labels() -> None:
    row = make_row(
        from_addr="shop@faß.example",
        recipients=[{"kind": "to", "address": "kunde@faß.example"},
                    {"kind": "cc", "address": "a@ελλάς.example"}],
    )  # fmt: skip
    prepared = mime.prepare(row, []).for_server(PLAIN)
    greek = idna.encode("ελλάς.example", uts46=True, transitional=False).decode()
    assert greek == "xn--hxarsa0b.example"  # not IDNA2003's xn--hxarsa5b
    assert prepared.sender == "shop@xn--fa-hia.example"  # not fass.example
    assert prepared.recipients == ["kunde@xn--fa-hia.example", f"a@{greek}"]
    assert prepared.stored == ["kunde@faß.example", "a@ελλάς.example"]
    mail = parsed(b"".join(prepared.data.pieces()))
    assert mail["To"].addresses[0].addr_spec == "kunde@xn--fa-hia.example"


def test_a_domain_idna2008_refuses_fails_that_recipient_alone() -> None:
    row = make_row(recipients=[{"kind": "to", "address": "a@example.com"},
                               {"kind": "to", "address": "b@a\u200db.example"}])  # fmt: skip
    prepared = mime.prepare(row, []).for_server(PLAIN)
    assert prepared.recipients == ["a@example.com"]
    assert "IDNA2008 refuses" in prepared.unsendable["b@a\u200db.example"]
    parsed(b"".join(prepared.data.pieces()))
    with pytest.raises(mime.BuildError, match="IDNA2008"):
        mime.prepare(make_row(from_addr="z@a\u200db.example"), [])


def test_a_non_ascii_local_part_needs_smtputf8_and_is_never_rewritten() -> None:
    row = make_row(recipients=[{"kind": "to", "address": "jörg@example.com", "name": "Jörg"},
                               {"kind": "to", "address": "a@example.com"}])  # fmt: skip
    mail = mime.prepare(row, [])
    without = mail.for_server(PLAIN)
    assert without.recipients == ["a@example.com"]
    assert without.unsendable == {"jörg@example.com": mime.NO_SMTPUTF8.format("jörg@example.com")}
    data = b"".join(without.data.pieces())
    assert b"To: =?utf-8?" in data and b":;, a@example.com" in data  # an empty group, ASCII
    assert parsed(data)["To"].groups[0].display_name == "Jörg <jörg@example.com>"
    utf8 = mail.for_server(UTF8)
    assert utf8.recipients == ["jörg@example.com", "a@example.com"] and utf8.data.smtputf8
    assert "<jörg@example.com>".encode() in b"".join(utf8.data.pieces())
    assert mail.for_server(UTF8) is utf8  # made once per server kind
    with pytest.raises(mime.BuildError, match="SMTPUTF8"):
        mime.prepare(make_row(from_addr="jörg@example.com"), []).for_server(PLAIN)
    assert mime.prepare(make_row(from_addr="jörg@example.com"), []).for_server(UTF8).sender == (
        "jörg@example.com"
    )


def test_message_ids_are_valid_msg_ids_with_a_labels() -> None:
    sender = SimpleNamespace(domain="bücher.example")
    assert msgid_domain(sender) == "xn--bcher-kva.example"  # type: ignore[arg-type]
    for stored in ["<1.2.3@bücher.example>", "<=?utf-8?q?x?=@b>", "junk", ""]:
        data = data_of(make_row(message_id=stored))
        msgid = parsed(data)["Message-ID"]
        assert MSG_ID.fullmatch(msgid)
        assert data_of(make_row(message_id=stored)).count(msgid.encode()) == 1  # stable
    assert b"Message-ID: <1.2.3@xn--bcher-kva.example>\r\n" in data_of(
        make_row(message_id="<1.2.3@bücher.example>")
    )


def test_headers_encode_what_would_not_read_back_and_nothing_else() -> None:
    row = make_row(
        subject="=?utf-8?q?x?= is literal text",
        from_name="Ann",
        recipients=[{"kind": "to", "address": f"r{n}@example.com", "name": f"R {n}"}
                    for n in (3, 1, 2)]
        + [{"kind": "cc", "address": "c@example.com", "name": "Doe, J"}],
        headers={"X-Free": "Grüße " * 40},
    )  # fmt: skip
    data = data_of(row)
    assert b"From: Ann <z@example.com>\r\n" in data  # ASCII names go as they are
    assert b'Cc: "Doe, J" <c@example.com>\r\n' in data
    words = re.findall(rb"=\?[^?]+\?[bq]\?[^?]*\?=", data, re.I)
    assert words and max(map(len, words)) <= 75
    mail = parsed(data)
    assert [a.addr_spec for a in mail["To"].addresses] == ["r3@example.com", "r1@example.com",
                                                           "r2@example.com"]  # fmt: skip
    check(data, row, [], False)


def test_shapes_and_attachment_parameters() -> None:
    html_only = parsed(data_of(make_row(text_body=None, html_body="<b>x</b>")))
    assert html_only.get_content_type() == "text/html" and not html_only.is_multipart()
    attachments = [Upload("résumé.txt", "text/plain; charset=iso-8859-1", "é".encode("latin-1"))]
    data = data_of(make_row(), attachments)
    assert b"filename*=UTF-8''r%C3%A9sum%C3%A9.txt" in data
    (part,) = parsed(data).iter_attachments()
    assert part.get_content_charset() == "iso-8859-1" and part.get_content() == "é"


def test_a_recipient_listed_twice_is_sent_to_once() -> None:
    row = make_row(recipients=[{"kind": "to", "address": "a@Example.com"},
                               {"kind": "cc", "address": "a@example.COM"},
                               {"kind": "bcc", "address": "A@example.com"},
                               {"kind": "bcc", "address": "b@x.org", "state": "sent"}])  # fmt: skip
    prepared = mime.prepare(row, []).for_server(PLAIN)
    assert prepared.recipients == ["a@Example.com", "A@example.com"]  # local parts differ
    assert prepared.stored == ["a@Example.com", "A@example.com"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"recipients": []}, "no recipient address"),
        ({"from_addr": ""}, "no sender address"),
        ({"subject": "a\nBcc: x@example.com"}, "a header holds a line break"),
        ({"text_body": "lone \ud800 surrogate"}, "cannot build message: UnicodeEncodeError"),
        ({"headers": {"X-A": 5}}, "is not text"),
    ],
)
def test_prepare_refuses_rows_that_can_never_go(change, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(mime.BuildError, match=error):
        mime.prepare(make_row(**change), [])


def test_every_mail_names_its_message_or_mailing_in_a_feedback_id() -> None:
    message = parsed(data_of(make_row(id=41, stream="transactional")), False)
    assert message["Feedback-ID"] == "41:transactional:message:outbox"
    mailing = parsed(data_of(make_row(id=42, mailing_id=7, stream="broadcast")), False)
    assert mailing["Feedback-ID"] == "7:broadcast:mailing:outbox"
    read = feedback_id.read
    assert read(message["Feedback-ID"]) == feedback_id.FeedbackId("message", 41, "transactional")
    assert read(mailing["Feedback-ID"]) == feedback_id.FeedbackId("mailing", 7, "broadcast")


def test_an_apps_own_feedback_id_goes_instead_of_outboxs() -> None:
    data = data_of(make_row(headers={"feedback-id": "c1:shop:receipt:acme"}))
    assert parsed(data, False).get_all("Feedback-ID") == ["c1:shop:receipt:acme"]
    assert feedback_id.read("c1:shop:receipt:acme") is None


NOT_OURS = ["", "x:transactional:message:outbox", "1:2:message:outbox",
            "1:broadcast:message:other", "1:broadcast:thing:outbox"]  # fmt: skip


@pytest.mark.parametrize("text", NOT_OURS)
def test_a_feedback_id_outbox_did_not_write_names_nothing(text: str) -> None:
    assert feedback_id.read(text) is None
