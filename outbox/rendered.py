"""A mail as SMTP takes it: its envelope, and its DATA with attachments encoded as it goes out."""

import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.policy import Compat32

# What str.splitlines() splits an ASCII string at.
ASCII_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c-\x1e]")


class WirePolicy(Compat32):
    """The legacy policy with SMTP's line ends, writing short ASCII header lines as they are.

    Flask-Mail renders with policy.SMTP, whose header parsing and refolding cost more than
    the rest of a send (bench/README). Flask-Mail has already
    encoded the subject, addresses and file names to ASCII, and build() encodes the
    extra headers, so nothing is left for the modern policy to do. The legacy folding
    still runs a Header through every line; lines that need no folding skip it.
    """

    def _fold(self, name: str, value: object, sanitize: bool) -> str:
        if isinstance(value, str) and value.isascii():
            if len(name) + len(value) + 2 <= (self.max_line_length or 78):
                if not ASCII_LINE_BREAK.search(value):  # one short line: most headers
                    return f"{name}: {value}{self.linesep}"
            # Flask-Mail's encoded words come folded already ("\n " between them),
            # each up to 76 characters: the first then goes beside the name.
            first, *rest = value.splitlines() or [""]
            lines = [f"{name}: {first}", *rest]
            limit = self.max_line_length or 78
            # A line with no space in its value has nowhere to fold (a Message-ID).
            unfoldable = not rest and " " not in first and "\t" not in first
            if (
                len(lines[0]) <= (limit if not rest and not unfoldable else 998)
                and all(len(line) <= limit for line in rest)
                and all(line[:1] in (" ", "\t") and line.strip() for line in rest)
            ):
                return self.linesep.join(lines) + self.linesep
        return super()._fold(name, value, sanitize)  # type: ignore[misc]


WIRE = WirePolicy(linesep="\r\n")


# Raw attachment bytes base64-encoded at a time: 57 bytes make one 76-character
# line, as email.encoders writes them; a block is about 620 KiB on the wire.
BLOCK_BYTES = 57 * 8192


def _base64_lines(data: bytes) -> Iterator[bytes]:
    """data as email.encoders writes it: base64 lines of 76 characters, here with CRLF."""
    view = memoryview(data)
    for start in range(0, len(view), BLOCK_BYTES):
        text = binascii.b2a_base64(view[start : start + BLOCK_BYTES], newline=False)
        lines = [text[i : i + 76] for i in range(0, len(text), 76)]
        lines.append(b"")  # the last line's CRLF
        yield b"\r\n".join(lines)


def _base64_size(size: int) -> int:
    chars = -(-size // 3) * 4
    return chars + 2 * -(-chars // 76)


@dataclass(frozen=True)
class Features:
    """What the server offered in its EHLO reply that changes the mail written for it."""

    eight_bit: bool = False  # 8BITMIME
    smtputf8: bool = False  # SMTPUTF8


@dataclass(frozen=True)
class Rendered:
    """A message's DATA: the rendered text around each attachment's body, kept raw.

    texts holds one more item than bodies: the text before the first body, between
    bodies and after the last. A body goes on the wire as base64 made a block at a
    time, so a 20 MiB attachment is never held encoded, whole, beside its raw bytes.
    """

    texts: list[bytes]
    bodies: list[bytes]
    eight_bit: bool = False  # holds octets over 127: MAIL FROM says BODY=8BITMIME
    smtputf8: bool = False  # a UTF-8 address in the envelope or headers: MAIL FROM says SMTPUTF8

    def size(self) -> int:
        """Bytes in the DATA before dot-stuffing, as the SIZE parameter counts them."""
        return sum(map(len, self.texts)) + sum(_base64_size(len(b)) for b in self.bodies)

    def pieces(self) -> Iterator[bytes]:
        """The DATA in order, in pieces that each begin a line."""
        yield self.texts[0]
        for body, text in zip(self.bodies, self.texts[1:], strict=True):
            yield from _base64_lines(body)
            yield text


@dataclass(frozen=True)
class Prepared:
    """A mail ready for SMTP to one server: its envelope and its DATA."""

    sender: str
    recipients: list[str]  # RCPT TO as they go on the wire, each once
    data: Rendered
    stored: list[str] = field(default_factory=list)  # the stored address of each recipient
    unsendable: dict[str, str] = field(default_factory=dict)  # stored address: why not here
