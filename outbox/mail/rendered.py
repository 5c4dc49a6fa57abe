"""A mail as SMTP takes it: its envelope, and its DATA with attachments encoded as it goes out."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from outbox.mail.encoding import base64_blocks, base64_size


@dataclass(frozen=True)
class Features:
    """What a server offered in its EHLO answer that changes how a mail is written."""

    eight_bit: bool = False  # 8BITMIME (RFC 6152)
    smtputf8: bool = False  # SMTPUTF8 (RFC 6531)


@dataclass(frozen=True)
class Rendered:
    """A message's DATA: the rendered text around each attachment's body, kept raw.

    texts holds one more item than bodies: the text before the first body, between
    bodies and after the last. A body goes on the wire as base64 made a block at a
    time, so a 20 MiB attachment is never held encoded, whole, beside its raw bytes.
    """

    texts: list[bytes]
    bodies: list[bytes]
    eight_bit: bool = False  # the DATA holds octets over 127: MAIL FROM needs BODY=8BITMIME
    smtputf8: bool = False  # a UTF-8 address in the envelope or headers: MAIL FROM needs SMTPUTF8

    def size(self) -> int:
        """Bytes in the DATA before dot-stuffing, as the SIZE parameter counts them."""
        return sum(map(len, self.texts)) + sum(base64_size(len(b)) for b in self.bodies)

    def pieces(self) -> Iterator[bytes]:
        """The DATA in order, in pieces that each begin a line."""
        yield self.texts[0]
        for body, text in zip(self.bodies, self.texts[1:], strict=True):
            yield from base64_blocks(body)
            yield text


@dataclass(frozen=True)
class Prepared:
    """A mail ready for one SMTP server: its envelope and its DATA."""

    sender: str  # the envelope sender as it goes on the wire (A-label domain)
    recipients: list[str]  # RCPT TO addresses as they go on the wire, each once, in order
    stored: list[str]  # the stored address each of recipients stands for
    data: Rendered
    # Stored address -> why it cannot go to this server (a non-ASCII local part and no
    # SMTPUTF8; a domain IDNA2008 refuses). These fail, each on its own.
    unsendable: dict[str, str] = field(default_factory=dict)


class Sendable(Protocol):
    """A mail a worker sends: written from its row (mime.Mail) or kept as it came
    (submission.raw.RawMail)."""

    pending: list[str]  # stored addresses of the recipients still to be sent to, in order
    returns: dict[str, str] | None  # VERP return path of each pending address

    def for_server(self, features: Features) -> Prepared:
        """The mail as it goes to a server offering features; BuildError if it cannot."""
        ...
