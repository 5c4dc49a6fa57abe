"""A submitted mail's lines made fit for SMTP, as real clients send them (RFC 6409 8).

A bare LF is taken as a line end (curl without --crlf, sendmail-style programs). A header
line over 998 octets (RFC 5322 2.1.1) is folded before whitespace; a body part with such
a line is re-encoded: quoted-printable (or base64, when shorter) for text, base64 for
anything else, its charset kept; a quoted-printable or base64 part is encoded again
with short lines. What needs no repair keeps its bytes; what cannot be repaired (a
header line without whitespace to fold at, a part in a transfer encoding outbox does not
know) is Refused naming the field or the part. A bare CR is left for the store to
refuse: no client uses it as a line end, and taking it as one would split a field where
the client did not.
"""

import base64
import binascii
import re
from bisect import bisect_right
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import compat32

from outbox.capabilities.submission import Refused

MAX_LINE = 998  # octets before CRLF (RFC 5322 2.1.1)
FOLD_AT = 78  # where a folded line should end if it can (RFC 5322 2.1.1)
BARE_CR = re.compile(rb"\r(?!\n)")
FOLD = re.compile(rb"[ \t](?=[^ \t])")  # whitespace a continuation line can begin with
FIELD = re.compile(rb"([!-9;-~]+)[ \t]*:")  # a field name (RFC 5322 3.6.8)
MAX_DEPTH = 50  # parts within parts: no mail nests deeper, and recursion has a limit
BASE64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")
UNENCODED = {"7bit", "8bit", "binary"}
HEADERS = BytesHeaderParser(policy=compat32)


@dataclass(frozen=True)
class Place:
    """Where in the mail an entity is, as a reply names it: "" for the mail, "2.1" for a part."""

    section: str = ""

    def of(self, what: str) -> str:
        return what if not self.section else f"{what} of body part {self.section}"

    def part(self, number: int) -> "Place":
        if self.section.count(".") >= MAX_DEPTH:
            raise _refused(f"body part {self.section} holds parts more than {MAX_DEPTH} deep")
        return Place(f"{self.section}.{number}" if self.section else str(number))


def _refused(text: str) -> Refused:
    return Refused(554, "5.6.0", text)


def repaired(data: bytes) -> bytes:
    """data with CRLF line ends and no line over MAX_LINE octets; data itself if it has both.

    Refused naming the field or the part that cannot be repaired.
    """
    data = line_ends(data)
    if not _long(data) or BARE_CR.search(data):  # the store names a bare CR's line
        return data
    return _entity(data, Place())


def line_ends(data: bytes) -> bytes:
    """data with each bare LF taken as a line end (CRLF).

    A client that ends its lines with LF ends DATA with CRLF.CRLF all the same (curl
    sends "\\r\\n.\\r\\n" after content ending in LF): that CRLF is the terminator's,
    not an empty line of the mail.
    """
    if data.count(b"\n") == data.count(b"\r\n"):
        return data
    if data.endswith(b"\n\r\n") and not data.endswith(b"\r\n\r\n"):
        data = data[:-2]
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def _long(data: bytes) -> bool:
    """Whether a line of data is over MAX_LINE octets (a scan in C: a regex would go back
    over each line once for every octet of it)."""
    return max(map(len, data.split(b"\r\n"))) > MAX_LINE


def _entity(data: bytes, place: Place, default: str = "text/plain") -> bytes:
    """A MIME entity (header fields, an empty line, a body) with its long lines repaired."""
    if data.startswith(b"\r\n"):
        head, body = b"", data[2:]
    elif (end := data.find(b"\r\n\r\n")) >= 0:
        head, body = data[: end + 2], data[end + 4 :]
    else:
        return folded(data, place)
    head = folded(head, place)
    if _long(body):
        head, body = _body(head, body, place, default)
    return head + b"\r\n" + body


def folded(head: bytes, place: Place) -> bytes:
    """Header lines with each line over MAX_LINE octets folded; Refused if one cannot be."""
    if not _long(head):
        return head
    lines, name = head.split(b"\r\n"), ""
    for index, line in enumerate(lines):
        if line[:1] not in (b" ", b"\t"):
            field = FIELD.match(line)  # not a field: left for the store to refuse by line
            name = field.group(1).decode("ascii")[:60] if field else ""
        if len(line) > MAX_LINE and name:
            lines[index] = b"\r\n".join(_cut(line, name, place))
    return b"\r\n".join(lines)


def _cut(line: bytes, name: str, place: Place) -> list[bytes]:
    """line cut before whitespace into lines of FOLD_AT octets where it can, MAX_LINE at most.

    A field's first line is not cut before the whitespace just after its colon.
    """
    if line[:1] in (b" ", b"\t"):
        first = len(line) - len(line.lstrip(b" \t")) + 1
    else:
        first = line.find(b":") + 2
    points = [m.start() for m in FOLD.finditer(line, max(first, 1))]
    pieces, start = [], 0
    while len(line) - start > FOLD_AT:
        after, near = bisect_right(points, start), bisect_right(points, start + FOLD_AT)
        if near > after:
            cut = points[near - 1]  # the last point within FOLD_AT
        else:
            cut = points[after] if after < len(points) else len(line)
        if cut - start > MAX_LINE:
            run = max(len(w) for w in line[start:cut].split())
            raise _refused(
                f"the {place.of(name + ' field')} cannot be folded: it holds {run} octets "
                f"without a space, over the {MAX_LINE} a line may have (RFC 5322 2.1.1)"
            )
        if cut == len(line):
            break
        pieces.append(line[start:cut])
        start = cut
    return [*pieces, line[start:]]


def _body(head: bytes, body: bytes, place: Place, default: str) -> tuple[bytes, bytes]:
    """The entity's header and body with the body's long lines repaired, by its type."""
    fields = HEADERS.parsebytes(head + b"\r\n")
    fields.set_default_type(default)
    kind = fields.get_content_type()
    encoding = str(fields.get("content-transfer-encoding", "7bit")).strip().lower()
    if fields.get_content_maintype() == "multipart":
        boundary = fields.get_boundary()
        if not boundary:
            raise _refused(f"{_named(place, kind)} has no boundary to find its parts by")
        inner = "message/rfc822" if kind == "multipart/digest" else "text/plain"
        return head, _multipart(body, boundary.encode(), place, kind, inner)
    if kind in ("message/rfc822", "message/global") and encoding in UNENCODED:
        return head, _entity(body, place.part(1))
    return _leaf(head, body, fields, place)


def _named(place: Place, kind: str) -> str:
    return f"body part {place.section} ({kind})" if place.section else f"the body ({kind})"


def _multipart(body: bytes, boundary: bytes, place: Place, kind: str, inner: str) -> bytes:
    """A multipart body with each part repaired; the preamble and epilogue wrapped.

    The CRLF before a delimiter line is the delimiter's (RFC 2046 5.1.1), not the part's.
    """
    lines = body.split(b"\r\n")
    marks = [i for i, line in enumerate(lines) if _delimiter(line, boundary)]
    if not marks:
        raise _refused(f"{_named(place, kind)} holds no line with its boundary")
    out = _wrapped(lines[: marks[0]], boundary)
    for number, (mark, end) in enumerate(zip(marks, [*marks[1:], len(lines)], strict=True), 1):
        out.append(lines[mark])
        if lines[mark].rstrip(b" \t") == b"--" + boundary + b"--":  # then the epilogue
            out += _wrapped(lines[mark + 1 : end], boundary)
            continue
        if mark + 1 < end:
            part = b"\r\n".join(lines[mark + 1 : end])
            out.append(_entity(part, place.part(number), inner))
    return b"\r\n".join(out)


def _delimiter(line: bytes, boundary: bytes) -> bool:
    found = line.rstrip(b" \t")  # transport padding (RFC 2046 5.1.1)
    return found in (b"--" + boundary, b"--" + boundary + b"--")


def _wrapped(lines: list[bytes], boundary: bytes) -> list[bytes]:
    """A preamble's or epilogue's lines cut at MAX_LINE octets: readers ignore both
    (RFC 2046 5.1.1); no cut makes a line that begins like a delimiter."""
    out = []
    for line in lines:
        while len(line) > MAX_LINE:
            cut = MAX_LINE
            while cut > 1 and line[cut:].startswith(b"--" + boundary):
                cut -= 1
            out.append(line[:cut])
            line = line[cut:]
        out.append(line)
    return out


def _leaf(head: bytes, body: bytes, fields: Message, place: Place) -> tuple[bytes, bytes]:
    """A single part re-encoded so that its lines are short; the same content decoded."""
    kind = fields.get_content_type()
    encoding = str(fields.get("content-transfer-encoding", "7bit")).strip().lower()
    if encoding == "base64":
        return head, _base64(_base64_content(body, place, kind), body)
    if encoding == "quoted-printable":
        return head, quoted_printable(binascii.a2b_qp(body))
    if encoding not in UNENCODED:
        raise _refused(
            f"{_named(place, kind)} has lines over {MAX_LINE} octets in a transfer encoding "
            f"outbox cannot encode again ({encoding}): send it quoted-printable or base64"
        )
    encoded, name = _base64(body, body), "base64"
    if fields.get_content_maintype() == "text":
        shorter = quoted_printable(body)
        if len(shorter) <= len(encoded):
            encoded, name = shorter, "quoted-printable"
    return _encoded_as(head, name, body, fields, top=not place.section), encoded


def _base64_content(body: bytes, place: Place, kind: str) -> bytes:
    packed = b"".join(body.split())
    if not BASE64.fullmatch(packed) or len(packed) % 4:
        raise _refused(f"{_named(place, kind)} is not valid base64 and has lines over "
                       f"{MAX_LINE} octets")  # fmt: skip
    return base64.b64decode(packed)


def _base64(content: bytes, body: bytes) -> bytes:
    """content in base64 lines of 76 characters; CRLF at the end if body ended with one."""
    lines = base64.encodebytes(content).rstrip(b"\n").replace(b"\n", b"\r\n")
    return lines + b"\r\n" if body.endswith(b"\r\n") else lines


def quoted_printable(content: bytes) -> bytes:
    """content quoted-printable, line for line (RFC 2045 6.7): each CRLF a line end, any
    other CR or LF encoded, so that decoding gives content back exactly."""
    return b"\r\n".join(
        binascii.b2a_qp(line, istext=False).replace(b"=\n", b"=\r\n")
        for line in content.split(b"\r\n")
    )


def _encoded_as(head: bytes, name: str, body: bytes, fields: Message, top: bool) -> bytes:
    """head saying the body is now in the transfer encoding name (RFC 2045 6).

    The field replaces the old one in its place. A mail that was not MIME becomes MIME
    1.0; one that named no charset for 8-bit text gets UTF-8's if the text is UTF-8,
    unknown-8bit (RFC 1428) if not.
    """
    lines = _fields(head)
    field = f"Content-Transfer-Encoding: {name}\r\n".encode()
    at = next((i for i, f in enumerate(lines) if _is(f, b"content-transfer-encoding")), None)
    if at is None:
        lines.append(field)
    else:
        lines[at] = field
    if fields.get("content-type") is None and not body.isascii():
        charset = "utf-8" if _utf8(body) else "unknown-8bit"
        lines.append(f"Content-Type: text/plain; charset={charset}\r\n".encode())
    if top and fields.get("mime-version") is None:
        lines.append(b"MIME-Version: 1.0\r\n")
    return b"".join(lines)


def _fields(head: bytes) -> list[bytes]:
    """Header fields, each with its folded lines and CRLF."""
    found: list[bytes] = []
    lines = head.split(b"\r\n")
    for line in lines[:-1] if lines[-1] == b"" else lines:
        if line[:1] in (b" ", b"\t") and found:
            found[-1] += line + b"\r\n"
        else:
            found.append(line + b"\r\n")
    return found


def _is(field: bytes, name: bytes) -> bool:
    return field.partition(b":")[0].strip().lower() == name


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
