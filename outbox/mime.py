"""A stored row as the bytes of a mail: Flask-Mail's message, and the same bytes written directly.

Flask-Mail builds a tree of email.mime objects that the email package's generator then
writes out, which was most of what a worker spent on a small message (bench/README).
prepare() writes the common shapes (a text part, or text and HTML as alternatives, no
attachments) straight to bytes, the very bytes OutgoingMessage.render()
writes for them (tests/test_mime.py compares the two on generated messages), and hands
every other shape to Flask-Mail.
"""

import binascii
import copy
import functools
import re
import secrets
import time
from email.header import Header
from email.utils import formatdate

from flask_mail import Attachment, Message, sanitize_address, sanitize_subject

from .addresses import LINE_BREAK, Kind, Mailbox, by_kind
from .models import Message as Row
from .rendered import WIRE, Features, Prepared, Rendered

Addresses = list[tuple[str, str]]  # (display name, address) pairs

# The generator's line ends, each written as CRLF.
NEWLINE = re.compile(r"\r\n|\r|\n")


def boundary() -> str:
    """A MIME boundary: "=_" and 128 random bits.

    Set before rendering, the generator need not compile a regular expression per
    part to prove its own boundary absent from the text. 128 random bits are in no
    text that did not guess them, and "=_" is in no base64 or quoted-printable text.
    """
    return f"=_{secrets.token_hex(16)}"


class OutgoingMessage(Message):
    """Flask-Mail's message, rendered for the wire with the legacy policy."""

    def render(self) -> Rendered:
        """The DATA, each attachment's body left out of the email package.

        The email package holds an attachment four times over while it encodes and
        writes it (raw, base64 pieces, joined, and as a str). Flask-Mail renders a
        stand-in for each body instead: bytes whose base64 is one random line, found
        in the text afterwards and cut out, with the headers Flask-Mail writes.
        """
        if not self.attachments:
            return Rendered([self._wire_bytes()], [])
        stand_in, markers, bodies = copy.copy(self), [], []
        stand_in.attachments = []
        for attachment in self.attachments:
            if isinstance(attachment.data, str):  # not from build(): left to the email package
                stand_in.attachments.append(attachment)
                continue
            bodies.append(attachment.data)
            marker = f"outboxattachment{secrets.token_hex(16)}".encode()  # 48 base64 digits
            markers.append(marker + b"\r\n")
            stand = copy.copy(attachment)
            stand.data = binascii.a2b_base64(marker)
            stand_in.attachments.append(stand)
        rest, texts = stand_in._wire_bytes(), []
        for marker in markers:
            before, found, rest = rest.partition(marker)
            if not found:
                raise ValueError("an attachment's stand-in is missing from the rendered text")
            texts.append(before)
        texts.append(rest)
        return Rendered(texts, bodies)

    # The envelope, from the stored addresses (build sets them).
    envelope_from: str = ""
    envelope_to: list[str] = []
    envelope_stored: list[str] = []

    def prepare(self) -> "Prepared":
        """The envelope and the DATA, as smtplib's sendmail takes them."""
        return Prepared(self.envelope_from, self.envelope_to, self.render(), self.envelope_stored)

    def _wire_bytes(self) -> bytes:
        message = self._message()
        message.policy = WIRE  # Flask-Mail sets policy.SMTP, which set_boundary would use
        for part in message.walk():
            if part.is_multipart():
                part.set_boundary(boundary())
        return message.as_bytes(policy=WIRE)


def _ascii_header(value: str) -> str:
    """A header value as ASCII, RFC 2047 encoded if it holds anything else."""
    return value if value.isascii() else Header(value, "utf-8").encode()


class BuildError(Exception):
    """The stored message cannot be turned into a mail; retrying will not help."""


def _listed(row: Row) -> tuple[Addresses, Addresses, Addresses]:
    """The row's To, Cc and Bcc as (name, address) pairs, in the order given.

    Pairs, not "name <addr>" text: Flask-Mail reads text again with parseaddr, which
    cuts an unquoted name holding a comma in two.
    """
    found = {kind: [(m.name, m.address) for m in listed]
             for kind, listed in by_kind(row.recipients).items()}  # fmt: skip
    return found[Kind.TO], found[Kind.CC], found[Kind.BCC]


def _mailbox(address: str | None, name: str) -> str:
    """An address with its display name as a header names it (quoted where it must be)."""
    return str(Mailbox(address, name)) if address else ""


def _breaks_line(texts: list[object]) -> bool:
    return LINE_BREAK.search(" ".join([str(text) for text in texts])) is not None


def _checked(row: Row) -> tuple[dict[str, str], Addresses, Addresses, Addresses]:
    """The row's extra headers and its To, Cc and Bcc pairs, or BuildError if it cannot go."""
    headers = dict(row.headers or {})
    # Checked as stored: Flask-Mail's has_bad_headers() looks at neither Cc nor
    # the extra headers.
    to, cc, bcc = _listed(row)
    stored = [row.subject, row.from_addr, row.from_name, row.reply_to, row.reply_to_name]
    if _breaks_line([*stored, *(text for pair in to + cc + bcc for text in pair),
                     *headers, *headers.values()]):  # fmt: skip
        raise BuildError("a header holds a line break")
    if not row.from_addr:
        raise BuildError("no sender address")
    if not (to or cc or bcc):
        # smtplib would refuse an empty recipient list with an empty error.
        raise BuildError("no recipient address in to, cc or bcc")
    return headers, to, cc, bcc


def build(row: Row, attachments: list[tuple[str, str, bytes]]) -> OutgoingMessage:
    """The Flask-Mail message for a stored row, with the row's fixed Message-ID."""
    try:
        headers, to, cc, bcc = _checked(row)
        message = OutgoingMessage(
            subject=row.subject,
            recipients=list[str | tuple[str, str]](to),
            cc=list[str | tuple[str, str]](cc),
            bcc=list[str | tuple[str, str]](bcc),
            sender=_mailbox(row.from_addr, row.from_name),
            reply_to=_mailbox(row.reply_to, row.reply_to_name) or None,
            body=row.text_body if row.text_body is not None else "",
            html=row.html_body,
            extra_headers={name: _ascii_header(value) for name, value in headers.items()},
            attachments=[Attachment(n, t, d) for n, t, d in attachments],
        )
        message.msgId = row.message_id
        message.envelope_from = _address(("", row.from_addr))
        message.envelope_to, message.envelope_stored = _envelope(row)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"cannot build message: {type(exc).__name__}: {exc}") from exc
    return message


class Mail:
    """A row's mail, written for each server as what it offers allows."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared

    def for_server(self, features: Features) -> Prepared:
        return self.prepared


def prepare(row: Row, attachments: list[tuple[str, str, bytes]]) -> Mail:
    """The row's mail: BuildError if it can never go."""
    return Mail(_prepared(row, attachments))


def _prepared(row: Row, attachments: list[tuple[str, str, bytes]]) -> Prepared:
    """The envelope and DATA of a row's mail, written directly where it can be."""
    if not attachments:
        try:
            return _direct(row)
        except Exception:  # Flask-Mail's path below says what is wrong, in its words
            pass
    message = build(row, attachments)
    try:
        return message.prepare()
    except Exception as exc:
        raise BuildError(f"cannot build message: {type(exc).__name__}: {exc}") from exc


def _direct(row: Row) -> Prepared:
    """What build(row, []).prepare() makes, without the email package's objects."""
    headers, to, cc, bcc = _checked(row)
    if not isinstance(row.message_id, str):
        raise TypeError("no Message-ID")
    text = row.text_body if row.text_body is not None else ""
    html = row.html_body
    # Flask-Mail's headers, in its order; its To and Cc go through a set.
    fields = [("Subject", sanitize_subject(row.subject))] if row.subject else []
    fields += [
        ("From", _address(_mailbox(row.from_addr, row.from_name))),
        ("To", ", ".join(list(set([_address(a) for a in to])))),
        ("Date", _date()),
        ("Message-ID", row.message_id),
    ]
    if cc:
        fields.append(("Cc", ", ".join(list(set([_address(a) for a in cc])))))
    if row.reply_to:
        fields.append(("Reply-To", _address(_mailbox(row.reply_to, row.reply_to_name))))
    fields += [(name, _ascii_header(value)) for name, value in headers.items()]
    if html is None:
        content = [("Content-Type", 'text/plain; charset="utf-8"'), ("MIME-Version", "1.0")]
        content.append(("Content-Transfer-Encoding", "7bit" if text.isascii() else "8bit"))
        data = _headers(content + fields) + _body(text)
    else:
        outer, inner = boundary().encode(), boundary().encode()
        data = b"".join([
            _multipart("mixed", outer), _headers(fields), b"--", outer, b"\r\n",
            _multipart("alternative", inner), b"\r\n--", inner, b"\r\n",
            _text_part(text, "plain"), b"\r\n--", inner, b"\r\n",
            _text_part(html, "html"), b"\r\n--", inner, b"--\r\n",
            b"\r\n--", outer, b"--\r\n",
        ])  # fmt: skip
    wire, stored = _envelope(row)
    return Prepared(_address(("", row.from_addr)), wire, Rendered([data], []), stored)


def _envelope(row: Row) -> tuple[list[str], list[str]]:
    """RCPT TO, each recipient not settled on its own once, in the order given; and the
    stored address of each."""
    stored = list(dict.fromkeys(e["address"] for e in row.recipients if "state" not in e))
    return [_address(("", address)) for address in stored], stored


def _headers(fields: list[tuple[str, str]]) -> bytes:
    """Header lines as the generator folds them, and the blank line after them."""
    return b"".join([WIRE.fold_binary(name, value) for name, value in fields]) + b"\r\n"


def _body(text: str) -> bytes:
    return NEWLINE.sub("\r\n", text).encode("utf-8")


def _text_part(text: str, subtype: str) -> bytes:
    """A MIMEText part in utf-8, as Flask-Mail makes it: 7bit if ASCII, else 8bit."""
    encoding = "7bit" if text.isascii() else "8bit"
    head = (
        f'Content-Type: text/{subtype}; charset="utf-8"\r\nMIME-Version: 1.0\r\n'
        f"Content-Transfer-Encoding: {encoding}\r\n\r\n"
    )
    return head.encode() + _body(text)


# Folding depends on lengths only, and every boundary() has the same length.
_TEMPLATE = "=_" + "0" * 32


@functools.cache
def _folded_multipart(kind: str) -> bytes:
    return WIRE.fold_binary("Content-Type", f'multipart/{kind}; boundary="{_TEMPLATE}"')


def _multipart(kind: str, mark: bytes) -> bytes:
    """A multipart's Content-Type and MIME-Version lines, as the generator writes them."""
    return _folded_multipart(kind).replace(_TEMPLATE.encode(), mark) + b"MIME-Version: 1.0\r\n"


def _address(address: str | tuple[str, str]) -> str:
    """Flask-Mail's sanitize_address, the same answer without its parsing where there is none."""
    if type(address) is tuple and not address[0] and address[1].isascii():
        return address[1]  # what formataddr makes of an address with no name
    return _sanitized(address)


@functools.lru_cache(maxsize=4096)
def _sanitized(address: str | tuple[str, str]) -> str:
    return sanitize_address(address)


_today: tuple[int, str] = (0, "")


def _date() -> str:
    """Flask-Mail's Date header for now, made once a second."""
    global _today
    now = int(time.time())
    if _today[0] != now:
        _today = (now, formatdate(now, localtime=True))
    return _today[1]
