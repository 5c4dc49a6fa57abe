"""DKIM signatures over rendered mails, held to dkimpy's own sign() and verify(); no database."""

import base64
import hashlib
import time
from types import SimpleNamespace

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from dkim.canonicalization import Relaxed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox.core.addresses import a_label
from outbox.core.checks import Upload
from outbox.mail import mime, signing
from outbox.mail.rendered import Features
from tests.support.dkimkeys import dns, signer, verifies
from tests.support.mailcheck import FILES, ROWS, check, make_row

PLAIN, UTF8 = Features(), Features(eight_bit=True, smtputf8=True)
# One key for each From domain test_mime's rows use, made once (as A-labels).
KEYS = {domain: signer(domain, "s1", "ed25519") for domain in
        ("example.com", "xn--fa-hia.example", "xn--hxarsa0b.example", "example.org")}  # fmt: skip


def whole(data) -> bytes:  # type: ignore[no-untyped-def]
    return b"".join(data.pieces())


def row(to=("a@example.com",), cc=(), text="Hi", html=None, **fields):  # type: ignore[no-untyped-def]
    """A stored row as test_mime makes them, with To and Cc as lists of addresses."""
    recipients = [{"kind": "to", "address": a} for a in to] + [
        {"kind": "cc", "address": a} for a in cc
    ]
    return make_row(recipients=recipients, text_body=text, html_body=html, **fields)


def signed_mail(signers, features=PLAIN, attachments=(), **fields) -> bytes:  # type: ignore[no-untyped-def]
    mail = mime.prepare(row(**fields), list(attachments))
    mail.signers = tuple(signers)
    return whole(mail.for_server(features).data)


@pytest.mark.parametrize(
    "pieces",
    [
        [b""],
        [b"\r\n"],
        [b"\r\n\r\n", b"\r\n"],
        [b"a  b \t\r\n", b"\r\n\r\n", b"c\r\n\r\n"],
        [b"line\r\n\r\n", b"\r\n", b"\r\n"],
        [b"no break at the end"],
        [b"single spaces only\r\n", b"x\r\n"],
        [b" lead\r\n", b"\t\tx \r\n \r\n", b"QUJD\r\nREVG\r\n", b"--b--\r\n\r\n\r\n"],
    ],
)
def test_the_streamed_body_hash_is_dkimpys_relaxed_hash_of_the_whole_body(pieces) -> None:  # type: ignore[no-untyped-def]
    expected = hashlib.sha256(Relaxed.canonicalize_body(b"".join(pieces))).digest()
    assert signing.body_hash(pieces) == expected


LINE = st.text(alphabet=" \ta=", max_size=6).map(str.encode)
PIECE = st.lists(LINE, min_size=1, max_size=4).map(lambda lines: b"\r\n".join(lines) + b"\r\n")


@given(st.lists(PIECE, max_size=5), LINE)
def test_the_streamed_body_hash_holds_for_any_whitespace_and_empty_lines(pieces, last) -> None:  # type: ignore[no-untyped-def]
    pieces = [*pieces, last]  # pieces begin lines; the last may end without a line break
    expected = hashlib.sha256(Relaxed.canonicalize_body(b"".join(pieces))).digest()
    assert signing.body_hash(pieces) == expected


@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
def test_the_header_is_byte_for_byte_what_dkimpy_sign_writes(kind) -> None:  # type: ignore[no-untyped-def]
    key, pem, _ = signer("example.com", "s1", kind)
    unsubscribe = {"List-Unsubscribe": "<https://example.com/u>"}
    message = signed_mail([], to=["ann@example.com"], cc=["bob@example.com"],
                          reply_to="r@example.com", headers=unsubscribe)  # fmt: skip
    if kind == "ed25519":  # dkimpy takes the Ed25519 seed in base64
        private = serialization.load_pem_private_key(pem.encode(), None)
        raw = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                    serialization.NoEncryption())  # type: ignore[arg-type]  # fmt: skip
        pem_or_seed = base64.b64encode(raw)
    else:
        pem_or_seed = pem.encode()
    headers, _ = dkim.rfc822_parse(message)
    names = [n for n in signing.SIGNED if n in {h.lower() for h, _ in headers}] + [b"from"]
    assert names == [b"from", b"to", b"cc", b"subject", b"date", b"message-id", b"reply-to",
                     b"mime-version", b"content-type", b"list-unsubscribe", b"from"]  # fmt: skip
    for _ in range(3):  # dkimpy takes t= from the clock: both within one second
        now = int(time.time())
        theirs = dkim.DKIM(message, signature_algorithm=key.algorithm).sign(
            b"s1", b"example.com", pem_or_seed, canonicalize=(b"relaxed", b"relaxed"),
            include_headers=names,
        )  # fmt: skip
        ours = signing.signed(mime.Rendered([message], []), [key], now=now).texts[0]
        if int(time.time()) == now:
            break
    assert ours == theirs + message


@pytest.mark.parametrize("features", [PLAIN, UTF8], ids=["quoted-printable", "8bit"])
@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
def test_signatures_verify_and_tampering_breaks_them(kind, features) -> None:  # type: ignore[no-untyped-def]
    key, _, record = signer("example.com", "s1", kind)
    records = {b"s1._domainkey.example.com.": record.encode()}
    message = signed_mail([key], features, text="Grüße aus Köln\n" * 20, subject="Straße")
    assert dkim.verify(message, dnsfunc=dns(records))
    assert (b"8bit" in message) == features.eight_bit
    body_changed = (
        message.replace("Köln".encode(), "köln".encode(), 1)
        if features.eight_bit
        else message + b"more\r\n"
    )
    assert not dkim.verify(body_changed, dnsfunc=dns(records))
    subject = message.replace(b"Subject: ", b"Subject: Re: ", 1)
    assert not dkim.verify(subject, dnsfunc=dns(records))
    second_from = b"From: evil@example.net\r\n" + message
    assert not dkim.verify(second_from, dnsfunc=dns(records))  # From is oversigned


def test_attachments_are_signed_as_they_stream_and_verify() -> None:
    key, _, record = signer("example.com", "s1")
    data = bytes(range(256)) * 4000  # a megabyte, base64 a block at a time
    message = signed_mail([key], attachments=[Upload("a.bin", "application/octet-stream", data)],
                          html="<p>" + "x" * 50_000 + "</p>")  # fmt: skip
    assert dkim.verify(message, dnsfunc=dns({b"s1._domainkey.example.com.": record.encode()}))


def test_each_signer_adds_a_signature_first_in_the_header_and_size_counts_them() -> None:
    rsa_key, _, rsa_record = signer("example.com", "r1")
    ed_key, _, ed_record = signer("example.com", "e1", "ed25519")
    mail = mime.prepare(row(), [])
    unsigned = mail.for_server(PLAIN).data
    mail = mime.prepare(row(), [])
    mail.signers = (rsa_key, ed_key)
    data = mail.for_server(PLAIN).data
    message = whole(data)
    assert message.startswith(b"DKIM-Signature: v=1; a=rsa-sha256;")
    assert message.count(b"\r\nDKIM-Signature: v=1; a=ed25519-sha256;") == 1
    assert data.size() == len(message) > unsigned.size()
    assert max(map(len, message.split(b"\r\n"))) <= 78
    records = {b"r1._domainkey.example.com.": rsa_record.encode(),
               b"e1._domainkey.example.com.": ed_record.encode()}  # fmt: skip
    for index in range(2):
        assert verifies(message, records, index)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=ROWS, attachments=FILES,
       features=st.sampled_from([PLAIN, Features(eight_bit=True), UTF8]))  # fmt: skip
def test_every_mail_signed_verifies_and_still_reads_back(fields, attachments, features) -> None:  # type: ignore[no-untyped-def]
    stored = SimpleNamespace(**fields)
    mail = mime.prepare(stored, attachments)
    domain = a_label(stored.from_addr.rpartition("@")[2]).lower()
    key, _, record = KEYS[domain]
    mail.signers = (key,)
    data = mail.for_server(features).data
    message = b"".join(data.pieces())
    assert data.size() == len(message)
    records = {b"s1._domainkey." + domain.encode() + b".": record.encode()}
    assert dkim.verify(message, dnsfunc=dns(records))
    check(message, stored, attachments, features.smtputf8)
