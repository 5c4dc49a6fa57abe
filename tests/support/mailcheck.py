"""What a mail on the wire must be: parsed by the email package with no defects, within
998 octets a line, with a valid Message-ID, decoding to exactly what was stored."""

import re
from email import message_from_bytes, message_from_string, policy
from email.errors import NonASCIILocalPartDefect, NonPrintableDefect
from email.message import EmailMessage
from types import SimpleNamespace
from typing import Any

from hypothesis import strategies as st

from outbox.core.addresses import LINE_BREAK, a_label
from outbox.core.checks import Upload
from outbox.core.recipients import decode, encode
from outbox.mail import encoding, feedback_id
from outbox.mail.encoding import NEWLINE

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
        entries = [e for e in encode(row.recipients) if e["kind"] == kind]
        got = named(head[kind], utf8) if entries else []
        assert same_mailboxes(got, entries, utf8), (kind, got, entries)
        assert (kind in head) == bool(entries)
    assert "Bcc" not in head
    for name, value in (row.headers or {}).items():
        assert head[name] == value, name
    if not any(name.lower() == "feedback-id" for name in row.headers or {}):
        wanted = feedback_id.value(row.id, row.mailing_id, row.stream)
        assert head.get_all("Feedback-ID") == [wanted]
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
    return [(filename(part), part.get_content_type(), part.get_payload(decode=True),
             str(part["Content-ID"])[1:-1] if part["Content-ID"] else None)
            for part in found]  # fmt: skip


def filename(part: EmailMessage) -> str | None:
    """A part's file name as written: the parsed parameter, not get_filename(), which takes
    the quotes off a name that begins and ends with one (`""` reads back as empty)."""
    disposition = part["Content-Disposition"]
    found = disposition.params.get("filename") if disposition is not None else None
    return found if found is not None else part.get_filename()


# Mails for the property tests, as rows of the messages table.
# Text that is hard to carry: every script, controls, long words, encoded-word look-alikes.
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
ONE_LINE = st.text(CHARS, max_size=120).filter(lambda v: not LINE_BREAK.search(v))
WORDS = st.one_of(
    ONE_LINE,
    st.sampled_from(["Ann", "Doe, Jane", 'Q "x" \\ y', "=?utf-8?q?Ann?=", " spaced  ", "中文"]),
    st.text(st.sampled_from("abcé =?_"), max_size=300),
)
BODY = st.lists(
    st.one_of(
        st.text(CHARS, max_size=30),
        st.sampled_from(["\r\n", "\n", "\r", "\n.", ".\r\n", "From ", " \n", "=\n", "\t"]),
        st.sampled_from(["x" * 2000, "中" * 1500, "<p>" * 400, "é" * 600]),
    ),
    max_size=30,
).map("".join)
# Display names without control characters: Python's parser reads those (and runs of
# whitespace, mailcheck.read_name) out of an encoded-word in a phrase other than they
# were written; the mail carries them as stored.
NAMES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=80),
    st.sampled_from(["Ann", "Doe, Jane", 'Q "x" \\ y', "=?utf-8?q?Ann?=", " spaced  ", "中文"]),
).filter(lambda v: not LINE_BREAK.search(v))
LOCAL = st.sampled_from(["ann", "a.b+c", "jörg", "o'neil", "x" * 64])
DOMAIN = st.sampled_from(["example.com", "faß.example", "ελλάς.example", "EXAMPLE.org"])
ADDRESS = st.builds("{}@{}".format, LOCAL, DOMAIN)
ENTRY = st.builds(
    lambda kind, address, name: {
        "kind": kind,
        "address": address,
        **({"name": name} if name else {}),
    },
    st.sampled_from(["to", "cc", "bcc"]),
    ADDRESS,
    st.one_of(st.just(""), NAMES),
)
# File names as checks.check_upload keeps them: stripped, never empty.
NAME = st.text(CHARS, min_size=1, max_size=255).filter(
    lambda v: not LINE_BREAK.search(v) and v.strip() == v and v.strip()
)
TYPES = st.sampled_from(
    ["application/pdf", "text/plain; charset=iso-8859-1", "image/png", "text/csv; charset=utf-8"]
)
# Content-IDs as checks.check_content_id keeps them: a msg-id, a bare word, the longest.
CONTENT_ID = st.one_of(
    st.none(), st.sampled_from(["part1.4C3B2A@example.com", "logo", "~" + "a" * 248 + "@"])
)
ATTACHMENT = st.builds(Upload, NAME, TYPES, st.binary(max_size=300), CONTENT_ID)
# A message's files: attachments and inline parts, no Content-ID given twice.
FILES = st.lists(ATTACHMENT, max_size=3, unique_by=lambda u: u.content_id or object())
ROWS = st.fixed_dictionaries(
    {
        "subject": st.one_of(WORDS, st.just("x" * 998), st.text(CHARS, max_size=998)).filter(
            lambda v: not LINE_BREAK.search(v)
        ),
        "from_addr": st.builds("{}@{}".format, st.sampled_from(["z", "o.b"]), DOMAIN),
        "from_name": st.one_of(st.just(""), NAMES),
        "recipients": st.lists(ENTRY, min_size=1, max_size=5).map(decode),
        "reply_to": st.none(),
        "reply_to_name": st.just(""),
        "text_body": st.one_of(st.none(), BODY),
        "html_body": st.one_of(st.none(), BODY),
        "headers": st.dictionaries(
            st.from_regex(r"X-[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True),
            st.one_of(WORDS, st.just("u" * 2000), st.just("a " * 600)),
            max_size=3,
        ),
        "message_id": st.sampled_from(["<1.2@example.com>", "<3.4@bücher.example>"]),
        "id": st.integers(min_value=1, max_value=2**63 - 1),
        "mailing_id": st.none() | st.integers(min_value=1, max_value=2**63 - 1),
        "stream": st.sampled_from(["transactional", "broadcast"]),
    }
)


def make_row(**fields: Any) -> SimpleNamespace:
    values = {
        "subject": "Hi", "from_addr": "z@example.com", "from_name": "", "reply_to": None,
        "reply_to_name": "", "recipients": [{"kind": "to", "address": "a@example.com"}],
        "text_body": "Hi", "html_body": None, "headers": {}, "message_id": "<1.2@example.com>",
        "id": 1, "mailing_id": None, "stream": "transactional",
    }  # fmt: skip
    values.update(fields)
    values["recipients"] = decode(values["recipients"])  # as the column type reads it
    return SimpleNamespace(**values)
