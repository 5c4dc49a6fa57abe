"""Mail at the edges of what the standards allow, sent by the worker to real aiosmtpd servers."""

import email
import email.policy
import io

import pytest
from sqlalchemy import func, select

from outbox.auth import tokens
from outbox.mail.rendered import Features
from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.rows import fresh, states
from tests.support.wire import aiosmtpd_server


@pytest.fixture
def server(app, request):  # type: ignore[no-untyped-def]
    """An aiosmtpd server offering what the test's parameter says, with the app pointed at it."""
    with aiosmtpd_server(request.param) as running:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = running.port
        yield running


PLAIN, UTF8 = Features(), Features(eight_bit=True, smtputf8=True)


def parsed(content: bytes) -> email.message.EmailMessage:
    mail = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(mail, email.message.EmailMessage)
    return mail


@pytest.mark.parametrize("server", [PLAIN], indirect=True)
def test_a_non_ascii_local_part_fails_alone_where_smtputf8_is_not_offered(server, make_message):
    message = make_message(to=["ann@example.com", "jörg@example.com"])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == "sent"
    assert states(row) == {"ann@example.com": ("sent", None, 1),
                           "jörg@example.com": ("failed", None, 1)}  # fmt: skip
    assert "SMTPUTF8" in row.last_error and "jörg@example.com" in row.last_error
    (got,) = server.received()
    assert got.rcpt_tos == ["ann@example.com"]  # never a rewritten address
    assert got.content.isascii()


@pytest.mark.parametrize("server", [UTF8], indirect=True)
def test_a_non_ascii_local_part_goes_as_utf8_where_smtputf8_is_offered(server, make_message):
    message = make_message(to=["ann@example.com", "Jörg <jörg@bücher.example>"])
    Worker().drain()
    assert fresh(message.id).status == "sent"
    (got,) = server.received()
    # The local part as given; the domain as its IDNA2008 A-label.
    rcpt_tos = [r.encode("utf-8", "surrogateescape").decode() for r in got.rcpt_tos]
    assert rcpt_tos == ["ann@example.com", "jörg@xn--bcher-kva.example"]
    assert "SMTPUTF8" in got.options
    # RFC 6532: the headers carry the address in UTF-8 as well.
    to = email.message_from_string(got.content.decode(), policy=email.policy.default)[
        "To"
    ].addresses
    assert [a.addr_spec for a in to] == ["ann@example.com", "jörg@xn--bcher-kva.example"]


@pytest.mark.parametrize("server", [PLAIN], indirect=True)
def test_sharp_s_and_final_sigma_keep_their_domains(server, make_message):
    # IDNA2003 sent these to fass.example and to the A-label of ελλάσ.
    message = make_message(to=["kunde@faß.example", "a@ελλάς.example"], from_addr="o@faß.example")
    Worker().drain()
    assert fresh(message.id).status == "sent"
    (got,) = server.received()
    assert got.rcpt_tos == ["kunde@xn--fa-hia.example", "a@xn--hxarsa0b.example"]
    assert got.mail_from == "o@xn--fa-hia.example"
    mail = parsed(got.content)
    assert mail["Message-ID"].endswith("@xn--fa-hia.example>") and mail["Message-ID"].isascii()


@pytest.mark.parametrize("server", [PLAIN, UTF8], indirect=True)
def test_the_longest_values_the_api_takes_go_out_in_lines_a_server_accepts(server, make_message):
    message = make_message(
        subject="x" * 998,
        text="a" * 2000 + "\n" + "漢" * 1500,
        html="<p>" + "b" * 50_000 + "</p>",
        headers={"X-Long": "y" * 2000, "X-Words": " ".join(["word"] * 400)},
    )
    Worker().drain()
    assert fresh(message.id).status == "sent"
    (got,) = server.received()
    assert max(len(line) for line in got.content.split(b"\r\n")) <= 998
    mail = parsed(got.content)
    assert mail["Subject"] == "x" * 998 and mail["X-Long"] == "y" * 2000
    text, html = (part.get_content() for part in mail.walk() if not part.is_multipart())
    # Text goes in canonical form, its line breaks as CRLF (RFC 2045 6.8, RFC 5322 2.3).
    assert text.replace("\r\n", "\n").rstrip("\n") == "a" * 2000 + "\n" + "漢" * 1500
    assert "b" * 50_000 in html


@pytest.mark.parametrize("server", [PLAIN], indirect=True)
def test_an_attachments_charset_comes_through_the_api(server, client):
    token = tokens.create("shop")
    form = {"from": "o@example.com", "to": "ann@example.com", "subject": "s", "text": "see"}
    latin = "Grüße".encode("iso-8859-1")
    files = {"attachments": [(io.BytesIO(latin), "note.txt",
                              "text/plain; charset=iso-8859-1")]}  # fmt: skip
    answer = client.post("/api/messages", data={**form, **files},
                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert answer.status_code == 201, answer.get_json()
    Worker().drain()
    (got,) = server.received()
    (part,) = [p for p in parsed(got.content).walk() if p.get_filename() == "note.txt"]
    assert part.get_content_type() == "text/plain" and part.get_param("charset") == "iso-8859-1"
    assert part.get_payload(decode=True) == latin


def test_a_malformed_content_type_parameter_is_refused_and_nothing_stored(client):
    token = tokens.create("shop")
    form = {"from": "o@example.com", "to": "ann@example.com", "subject": "s", "text": "see"}
    files = {"attachments": [(io.BytesIO(b"hi"), "note.txt", "text/plain; charset")]}
    answer = client.post("/api/messages", data={**form, **files},
                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert answer.status_code == 422
    assert "'charset' in 'text/plain; charset' is not a parameter" in answer.get_data(as_text=True)
    assert db.session.scalar(select(func.count()).select_from(Message)) == 0
