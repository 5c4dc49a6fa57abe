"""A stored row as a mail for one SMTP server: its envelope and DATA, written directly.

One writer for every shape: a text/plain or text/html part alone, the two as
multipart/alternative, and either inside multipart/mixed with attachments. Written
straight to bytes, without the email package's objects, which cost most of a worker's
time on a small message (bench/README). prepare() does what any server needs;
Mail.for_server() what depends on the server's 8BITMIME and SMTPUTF8.

Bodies decode to the text as submitted with each line break (CR, LF or CRLF) read back as
one, since MIME text carries CRLF (encoding.lines); tests/unit/test_mime.py and
tests/e2e/test_wire_roundtrip.py parse what this writes with the email package.
"""

import contextlib
import functools
import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate

from outbox.core.addresses import LINE_BREAK, Kind, Mailbox, a_label
from outbox.core.checks import Upload
from outbox.core.deliveries import pending
from outbox.core.recipients import by_kind
from outbox.core.schema import HEADER_NAME
from outbox.mail import encoding, feedback_id, signing
from outbox.mail.encoding import ATEXT, fold
from outbox.mail.parts import Pieces, attachment_head, content
from outbox.mail.rendered import Features, Prepared, Rendered
from outbox.models import Message as Row

Attachments = list[Upload]  # a message's files: attachments, and inline parts of its HTML

DOT_ATOM = re.compile(f"[{ATEXT}]+(?:\\.[{ATEXT}]+)*")
# RFC 6532 3.2: a UTF-8 local part's atoms take any non-ASCII character too.
UTF8_DOT_ATOM = re.compile(f"(?:[{ATEXT}]|[^\\x00-\\x7f])+(?:\\.(?:[{ATEXT}]|[^\\x00-\\x7f])+)*")
MSG_ID = re.compile(f"<{DOT_ATOM.pattern}@{DOT_ATOM.pattern}>")
NO_SMTPUTF8 = "server does not offer SMTPUTF8, needed for the non-ASCII local part of {}"


class BuildError(Exception):
    """The stored message cannot be turned into a mail; retrying will not help."""


@functools.lru_cache(maxsize=4096)
def wire_address(address: str, utf8: bool) -> str:
    """An addr-spec as it goes on the wire: A-label domain, the local part quoted if it must be.

    ValueError saying why if it cannot go: IDNA2008 refuses its domain, or its local part is
    not ASCII and the server takes no UTF-8 (utf8 false). Never rewritten otherwise.
    """
    local, at, domain = address.rpartition("@")
    if not at or not local:
        raise ValueError(f"{address!r} is not an address")
    if not local.isascii() and not utf8:
        raise ValueError(NO_SMTPUTF8.format(address))
    if not (DOT_ATOM if local.isascii() else UTF8_DOT_ATOM).fullmatch(local):
        local = '"' + local.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{local}@{a_label(domain)}"


@functools.lru_cache(maxsize=4096)
def mailbox_tokens(address: str, name: str, utf8: bool) -> tuple[tuple[str, ...], bool]:
    """A mailbox as header tokens, and whether they hold UTF-8 (RFC 6532).

    An address that cannot go to this server is written as an empty group named by the
    address as given (RFC 6857 3.1.2's way), so the header stays readable ASCII.
    """
    try:
        wire = wire_address(address, utf8)
    except ValueError:
        written = f"{name} <{address}>" if name else address
        return (*encoding.encoded_words(written, encoding.PHRASE_FIRST), ":;"), False
    if not name:
        return (wire,), not wire.isascii()
    return (*encoding.phrase(name), f"<{wire}>"), not wire.isascii()


def address_header(name: str, listed: list[Mailbox], utf8: bool) -> tuple[bytes, bool]:
    """An address header of mailboxes in the order given, and whether it holds UTF-8."""
    tokens: list[str] = []
    raw = False
    for mailbox in listed:
        found, utf = mailbox_tokens(mailbox.address, mailbox.name, utf8)
        if tokens:
            tokens[-1] += ","
        tokens.extend(found)
        raw |= utf
    return fold(name, tokens), raw


def wire_message_id(stored: str) -> str:
    """The stored Message-ID if it is a valid ASCII msg-id, else one made from it.

    Older rows hold ids with a Unicode domain (make_msgid's), which are not msg-ids: the
    domain goes as A-labels. Failing that, a digest of the stored id, the same each attempt.
    """
    if MSG_ID.fullmatch(stored):
        return stored
    left, _, right = stored.strip().strip("<>").rpartition("@")
    try:
        made = f"<{left}@{a_label(right)}>"
    except ValueError:
        made = ""
    if MSG_ID.fullmatch(made):
        return made
    return f"<{hashlib.sha256(stored.encode(errors='replace')).hexdigest()[:32]}@outbox.invalid>"


_today: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    """The Date header for now, made once a second."""
    global _today
    now = int(time.time())
    if _today[0] != now:
        _today = (now, f"Date: {formatdate(now, localtime=True)}\r\n".encode())
    return _today[1]


@dataclass
class Mail:
    """A row made ready for any server; for_server() finishes it for one."""

    sender: Mailbox
    reply_to: Mailbox | None
    to: list[Mailbox]
    cc: list[Mailbox]
    pending: list[str]  # stored addresses of the recipients still to be sent to, in order
    head: bytes  # Message-ID, Subject and the custom headers, encoded
    text: str | None
    html: str | None
    attachments: list[tuple[bytes, bytes]]  # (part headers, data)
    seven_bit: tuple[bytes, set[str]]  # the content for a server without 8BITMIME, its CTEs
    # Parts the HTML shows by Content-ID (cid:), as attachments are: with the HTML in
    # multipart/related (RFC 2387).
    inline: list[tuple[bytes, bytes]] = field(default_factory=list)
    made: dict[Features, Prepared] = field(default_factory=dict)
    # bounces: each pending address's VERP return path; None: VERP is off.
    returns: dict[str, str] | None = None
    # dkim: the keys that sign it, over the bytes each server gets.
    signers: tuple[signing.Signer, ...] = ()

    def for_server(self, features: Features) -> Prepared:
        """The mail as it goes to a server offering features; BuildError if it cannot go there."""
        made = self.made.get(features)
        if made is None:
            with _building():
                made = self.made[features] = self._made_for(features)
        return made

    def _made_for(self, features: Features) -> Prepared:
        utf8 = features.smtputf8
        try:
            sender = wire_address(self.sender.address, utf8)
        except ValueError as exc:
            raise BuildError(f"sender: {exc}") from None
        recipients, stored, unsendable = envelope(self.pending, utf8)
        head, raw = self._addresses(utf8)
        body, ctes = self.seven_bit
        if features.eight_bit and ctes != {"7bit"}:  # some text may go as it is, in 8bit
            body, ctes = content(self.text, self.html, True, bool(self.attachments or self.inline))
        # multipart/mixed around the attachments, multipart/related (RFC 2387) around the
        # HTML, alone or with its text alternative, and the parts it shows by cid:.
        pieces = Pieces(b"".join([_date(), head, self.head]))
        outer = pieces.open("multipart/mixed", []) if self.attachments else None
        root = "text/html" if self.text is None else "multipart/alternative"
        inner = pieces.open("multipart/related", [("type", root)]) if self.inline else None
        pieces.texts[-1] += body
        for mark, files in ((inner, self.inline), (outer, self.attachments)):
            if mark is not None:
                for part_head, part in files:
                    pieces.file(mark, part_head, part)
                pieces.close(mark)
        utf8_used = raw or not sender.isascii() or not all(r.isascii() for r in recipients)
        eight_bit = "8bit" in ctes or (raw and features.eight_bit)
        data = Rendered(pieces.texts, pieces.files, eight_bit, utf8_used)
        if self.signers:  # dkim: last, over what this server gets
            data = signing.signed(data, self.signers)
        return Prepared(sender, recipients, stored, data, unsendable)

    def _addresses(self, utf8: bool) -> tuple[bytes, bool]:
        """From, Reply-To, To and Cc, and whether any holds UTF-8."""
        found, raw = address_header("From", [self.sender], utf8)
        lines = [found]
        for name, listed in (("Reply-To", [self.reply_to] if self.reply_to else []),
                             ("To", self.to), ("Cc", self.cc)):  # fmt: skip
            if listed:
                found, utf = address_header(name, listed, utf8)
                lines.append(found)
                raw |= utf
        return b"".join(lines), raw


def envelope(pending: list[str], utf8: bool) -> tuple[list[str], list[str], dict[str, str]]:
    """RCPT TO's addresses as they go on the wire, the stored address each stands for, and
    the stored addresses that cannot go to a server offering SMTPUTF8 or not, with why."""
    recipients, stored, unsendable, seen = [], [], {}, set()
    for address in pending:
        try:
            wire = wire_address(address, utf8)
        except ValueError as exc:
            unsendable[address] = str(exc)
            continue
        local, _, domain = wire.rpartition("@")
        if (local, domain.lower()) not in seen:  # one RCPT for an address listed twice
            seen.add((local, domain.lower()))
            recipients.append(wire)
            stored.append(address)
    return recipients, stored, unsendable


def prepare(row: Row, attachments: Attachments) -> Mail:
    """What every server gets of a row's mail; BuildError if it can never go."""
    with _building():
        return _prepared(row, attachments)


@contextlib.contextmanager
def _building() -> Iterator[None]:
    """Any error but BuildError as the BuildError it is: the row cannot make a mail."""
    try:
        yield
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"cannot build message: {type(exc).__name__}: {exc}") from exc


def _prepared(row: Row, attachments: Attachments) -> Mail:
    headers = dict(row.headers or {})
    entries = list(row.recipients or [])
    listed = by_kind(entries)
    texts = [row.subject, row.from_addr, row.from_name, row.reply_to, row.reply_to_name,
             *(text for e in entries for text in (e.address, e.name or "")),
             *headers, *headers.values()]  # fmt: skip
    if LINE_BREAK.search(" ".join([str(text) for text in texts])):
        raise BuildError("a header holds a line break")
    if not row.from_addr:
        raise BuildError("no sender address")
    if not entries:
        raise BuildError("no recipient address in to, cc or bcc")
    for name, value in headers.items():
        if not HEADER_NAME.match(name):
            raise BuildError(f"{name!r} is not a valid header name")
        if not isinstance(value, str):
            raise BuildError(f"the value of the header {name} is not text")
    try:
        a_label(row.from_addr.rpartition("@")[2])
    except ValueError as exc:
        raise BuildError(f"sender: {exc}") from None
    head = [f"Message-ID: {wire_message_id(row.message_id or '')}\r\n".encode()]
    if row.subject:
        head.append(encoding.unstructured("Subject", row.subject))
    for name, value in headers.items():
        head.append(encoding.unstructured(name, value, long_words=True))
    if not any(name.lower() == "feedback-id" for name in headers):  # an app's own wins
        head.append(feedback_id.header(row.id, row.mailing_id, row.stream))
    head.append(b"MIME-Version: 1.0\r\n")
    html = row.html_body is not None
    return Mail(
        sender=Mailbox(row.from_addr, row.from_name or ""),
        reply_to=Mailbox(row.reply_to, row.reply_to_name or "") if row.reply_to else None,
        to=listed[Kind.TO],
        cc=listed[Kind.CC],
        pending=[e.address for e in pending(entries)],
        head=b"".join(head),
        text=row.text_body,
        html=row.html_body,
        # A Content-ID with no HTML to show it: an inline attachment, in multipart/mixed.
        attachments=[_part(a) for a in attachments if a.content_id is None or not html],
        inline=[_part(a) for a in attachments if a.content_id is not None and html],
        seven_bit=content(row.text_body, row.html_body, False, bool(attachments)),
    )


def _part(upload: Upload) -> tuple[bytes, bytes]:
    """A file as Mail keeps it: its part's headers, and its data."""
    return attachment_head(upload.filename, upload.content_type, upload.content_id), upload.data
