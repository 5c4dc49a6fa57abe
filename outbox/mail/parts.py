"""A mail's MIME parts as bytes: its text and HTML content, and each attachment's headers."""

import functools
import secrets
from email import policy

from outbox.mail import encoding
from outbox.mail.encoding import fold, parameters

# Types whose parts may not be base64-encoded (RFC 2046 5.1.1, 5.2.1): an attachment
# stored as one goes as application/octet-stream, its bytes unchanged.
COMPOSITE = ("multipart", "message")


def boundary() -> str:
    """A MIME boundary: "=_" and 128 random bits, in no text that did not guess them.

    "=_" is in no base64 or quoted-printable text either.
    """
    return f"=_{secrets.token_hex(16)}"


def text_part(text: str, subtype: str, eight_bit: bool, closed: bool) -> tuple[bytes, set[str]]:
    """A text part, its headers first, and its Content-Transfer-Encoding (in a set)."""
    cte, data = encoding.body(text, eight_bit, closed)
    head = (
        f'Content-Type: text/{subtype}; charset="utf-8"\r\nContent-Transfer-Encoding: {cte}\r\n\r\n'
    )
    return head.encode() + data, {cte}


def content(
    text: str | None, html: str | None, eight_bit: bool, closed: bool
) -> tuple[bytes, set[str]]:
    """The mail's text as a part, its headers first, and the transfer encodings it took.

    A text part alone, an HTML part alone (no empty text beside it), or the two as
    alternatives. closed: a multipart delimiter follows (the mail has attachments).
    """
    if html is None:
        return text_part(text or "", "plain", eight_bit, closed)
    if text is None:
        return text_part(html, "html", eight_bit, closed)
    mark = boundary()
    plain, plain_cte = text_part(text, "plain", eight_bit, True)
    rich, rich_cte = text_part(html, "html", eight_bit, True)
    between = f"\r\n--{mark}\r\n".encode()
    kind = fold("Content-Type", parameters("multipart/alternative", [("boundary", mark)]))
    parts = [kind, b"\r\n", between[2:], plain, between, rich, f"\r\n--{mark}--\r\n".encode()]
    return b"".join(parts), plain_cte | rich_cte


@functools.lru_cache(maxsize=256)
def _content_type(value: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A stored content type as its type and parameters; application/octet-stream if bad."""
    header = policy.default.header_factory("Content-Type", value)
    if header.defects or header.maintype in COMPOSITE:
        return "application/octet-stream", ()
    params = header.params.items()
    return header.content_type, tuple((k, v) for k, v in params if k.lower() != "name")


def attachment_head(filename: str, content_type: str, content_id: str | None = None) -> bytes:
    """An attachment part's headers: its type with every parameter it was stored with, its
    file name (RFC 2231 where it is not short plain ASCII) in both places readers look;
    with a Content-ID (RFC 2392, checked as checks.CONTENT_ID), an inline part."""
    kind, params = _content_type(content_type)
    disposition = "attachment" if content_id is None else "inline"
    return b"".join([
        fold("Content-Type", parameters(kind, [*params, ("name", filename)])),
        b"Content-Transfer-Encoding: base64\r\n",
        fold("Content-Disposition", parameters(disposition, [("filename", filename)])),
        b"" if content_id is None else f"Content-ID: <{content_id}>\r\n".encode(),
    ])  # fmt: skip


class Pieces:
    """A mail's text as pieces around its files' data, each file's data a piece of its own
    (Rendered streams them in turn), written a multipart at a time."""

    def __init__(self, top: bytes) -> None:
        self.texts, self.files = [top], list[bytes]()

    def open(self, kind: str, params: list[tuple[str, str]]) -> str:
        """Begin a multipart of kind (its Content-Type, the blank line, the first
        delimiter); its boundary. Its first part's headers and content come next."""
        mark = boundary()
        head = fold("Content-Type", parameters(kind, [*params, ("boundary", mark)]))
        self.texts[-1] += head + f"\r\n--{mark}\r\n".encode()
        return mark

    def file(self, mark: str, head: bytes, data: bytes) -> None:
        self.texts[-1] += f"\r\n--{mark}\r\n".encode() + head + b"\r\n"
        self.files.append(data)
        self.texts.append(b"")

    def close(self, mark: str) -> None:
        self.texts[-1] += f"\r\n--{mark}--\r\n".encode()
