"""What a mail on the wire must be: parsed by the email package with no defects, within
998 octets a line, with a valid Message-ID, decoding to exactly what was stored."""

import re
from email import message_from_bytes, message_from_string, policy
from email.errors import NonASCIILocalPartDefect, NonPrintableDefect
from email.message import EmailMessage
from typing import Any

from outbox import encoding
from outbox.addresses import a_label
from outbox.checks import Upload
from outbox.encoding import NEWLINE

ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
DOT_ATOM = rf"{ATEXT}(?:\.{ATEXT})*"
MSG_ID = re.compile(rf"<{DOT_ATOM}@{DOT_ATOM}>")  # RFC 5322 3.6.4, without the obsolete forms


ALLOWED = (NonASCIILocalPartDefect, NonPrintableDefect)


def long_lines(data: bytes) -> list[int]:
    """Lengths of the lines over 998 octets (RFC 5322 2.1.1)."""
    return [len(line) for line in data.split(b"\r\n") if len(line) > 998]


def parsed(data: bytes, utf8: bool = False) -> EmailMessage:
    """The mail as the email package reads it, checked free of defects.

    utf8: RFC 6532 headers, which the bytes parser takes as undecodable: the headers are
    checked as text (headers()). Python flags every non-ASCII local part
    (NonASCIILocalPartDefect), even then, and a control character that an encoded-word
    carries (NonPrintableDefect): both are what was stored, not faults of the mail.
    """
    assert long_lines(data) == []
    assert not any(b"\n" in line or b"\r" in line for line in data.split(b"\r\n"))
    head = data.split(b"\r\n\r\n", 1)[0]
    if not utf8:
        assert head.isascii()
    mail = message_from_bytes(data, policy=policy.default)
    for index, part in enumerate(mail.walk()):
        assert part.defects == [], part.defects
        if index or not utf8:
            _no_defects(part)
    if utf8:
        _no_defects(headers(data))
    assert MSG_ID.fullmatch(mail["Message-ID"]), mail["Message-ID"]
    return mail  # type: ignore[return-value]  # policy.default makes EmailMessage


def headers(data: bytes) -> EmailMessage:
    """The top headers of a mail, RFC 6532 UTF-8 included, as the email package reads them."""
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    return message_from_string(head + "\r\n\r\n", policy=policy.default)  # type: ignore[return-value]


def _no_defects(part: Any) -> None:
    for name, value in part.items():
        found = [d for d in value.defects if not isinstance(d, ALLOWED)]
        assert found == [], (name, str(value), value.defects)


def wire(address: str) -> str:
    local, _, domain = address.rpartition("@")
    return f"{local}@{a_label(domain)}"


def named(header: Any, utf8: bool) -> list[tuple[str, str]]:
    """(display name, address) of each mailbox in an address header; a group (an
    address the server could not take) as (its display name, "")."""
    found = []
    for group in header.groups:
        if group.display_name is not None:
            assert group.addresses == ()
            found.append((group.display_name, ""))
        else:
            found.extend((a.display_name, a.addr_spec) for a in group.addresses)
    return found


def same_mailboxes(got: list[tuple[str, str]], entries: list[dict[str, str]], utf8: bool) -> bool:
    """Whether the mailboxes read back are the stored ones, in order.

    A display name that had to be encoded is compared by its text without whitespace:
    Python's parser reads a phrase's encoded-words word by word, putting a space between
    adjacent words (RFC 2047 6.2 says what is between them is dropped) and reading runs of
    whitespace, NBSP and such included, as one space. The mail carries the name as stored
    (test_mime decodes one with the email.header module).
    """
    if len(got) != len(entries):
        return False
    for (name, address), entry in zip(got, entries, strict=True):
        stored, want = _expected(entry, utf8)
        if address != want:
            return False
        if encoding.phrase(stored)[0].startswith("=?"):
            name, stored = "".join(name.split()), "".join(stored.split())
        if name != stored:
            return False
    return True


def _expected(entry: dict[str, str], utf8: bool) -> tuple[str, str]:
    """The display name and address a stored mailbox should read back as."""
    address, name = entry["address"], entry.get("name", "")
    local, _, domain = address.rpartition("@")
    try:
        sendable = (local.isascii() or utf8) and a_label(domain)
    except ValueError:
        sendable = ""
    if sendable:
        return name, wire(address)
    return (f"{name} <{address}>" if name else address), ""  # an empty group


def text_of(part: EmailMessage | None) -> str | None:
    if part is None:
        return None
    content = part.get_content()
    assert isinstance(content, str)
    return content.replace("\r\n", "\n")


def check(data: bytes, row: Any, attachments: list[Upload], utf8: bool) -> None:
    """The mail parses clean and every field reads back as the row stored it."""
    mail = parsed(data, utf8)
    head = headers(data) if utf8 else mail
    assert head.get("Subject", "") == row.subject
    sender = [{"address": row.from_addr, "name": row.from_name}]
    assert same_mailboxes(named(head["From"], utf8), sender, utf8), (head["From"], sender)
    for kind in ("to", "cc"):
        entries = [e for e in row.recipients if e["kind"] == kind]
        got = named(head[kind], utf8) if entries else []
        assert same_mailboxes(got, entries, utf8), (kind, got, entries)
        assert (kind in head) == bool(entries)
    assert "Bcc" not in head
    for name, value in (row.headers or {}).items():
        assert head[name] == value, name
    text, html = row.text_body, row.html_body
    if text is None and html is None:
        text = ""
    for kind, stored in (("plain", text), ("html", html)):
        want = None if stored is None else NEWLINE.sub("\n", stored)
        assert text_of(mail.get_body((kind,))) == want, (
            kind,
            text_of(mail.get_body((kind,))),
            want,
        )
    assert files(mail) == [
        (a.filename, a.content_type.split(";")[0].strip().lower(), a.data, a.content_id)
        for a in [*(a for a in attachments if a.content_id and html is not None),
                  *(a for a in attachments if not (a.content_id and html is not None))]
    ]  # fmt: skip


def files(mail: EmailMessage) -> list[tuple[str | None, str, bytes, str | None]]:
    """Each file of a mail as (name, type, data, Content-ID without <>): the inline parts
    of its multipart/related first (RFC 2387: its type is its root's), then the
    attachments of its multipart/mixed."""
    related = [p for p in mail.walk() if p.get_content_type() == "multipart/related"]
    assert len(related) <= 1
    found = []
    for part in related:
        root = part.get_payload()[0]
        assert part.get_param("type") == root.get_content_type()
        assert root.get_content_type() in ("text/html", "multipart/alternative")
        for inline in part.iter_attachments():
            assert inline.get_content_disposition() == "inline" and inline["Content-ID"]
            found.append(inline)
    if mail.get_content_type() == "multipart/mixed":
        found += mail.iter_attachments()
    return [(part.get_filename(), part.get_content_type(), part.get_payload(decode=True),
             str(part["Content-ID"])[1:-1] if part["Content-ID"] else None)
            for part in found]  # fmt: skip
