"""A message to hand to outbox, as the API takes it: Email, its Attachments, its addresses."""

import base64
import mimetypes
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

# A mailbox: "addr", "Name <addr>", or a (name, addr) pair as email.utils.parseaddr gives.
Address = str | tuple[str, str]
Addresses = Address | Sequence[Address]


def mailbox(address: Address) -> str:
    """An address as the API reads it: a pair becomes "Name" <addr>, its name quoted.

    The name is quoted, not RFC 2047-encoded as email.utils.formataddr would: the API
    reads Unicode and encodes it when the mail is sent.
    """
    if isinstance(address, str):
        return address
    name, addr = address
    if not name:
        return addr
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{quoted}" <{addr}>'


def mailboxes(addresses: Addresses | None) -> list[str]:
    """One address or several, each as mailbox() writes it."""
    if addresses is None:
        return []
    if isinstance(addresses, str) or _is_pair(addresses):
        return [mailbox(addresses)]  # type: ignore[arg-type]
    return [mailbox(a) for a in addresses]


def _is_pair(value: Any) -> bool:
    """Whether value is one (name, addr) pair rather than a tuple of two addresses.

    ("Ann", "ann@example.com") is a pair; ("ann@example.com", "bob@example.com"), as
    Django code often writes its recipients, is two addresses: a name has no "@".
    """
    return (isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value)
            and "@" not in value[0] and "@" in value[1])  # fmt: skip


@dataclass(frozen=True)
class Attachment:
    """A file to attach: its name, bytes and type (guessed from the name when None).

    With a content_id, an inline part: the HTML shows it as `<img src="cid:logo">` for
    content_id "logo".
    """

    filename: str
    content: bytes
    content_type: str | None = None
    content_id: str | None = None

    @classmethod
    def from_path(
        cls, path: str | os.PathLike[str], content_type: str | None = None,
        content_id: str | None = None,
    ) -> "Attachment":  # fmt: skip
        """The file at path, named by its last part."""
        found = Path(path)
        return cls(found.name, found.read_bytes(), content_type, content_id)

    @classmethod
    def from_file(cls, file: IO[bytes], filename: str | None = None,
                  content_type: str | None = None) -> "Attachment":  # fmt: skip
        """What is left to read of a binary file, named filename or by the file's own name."""
        name = filename or os.path.basename(str(getattr(file, "name", "") or ""))
        if not name:
            raise ValueError("an attachment read from a file object needs a filename")
        return cls(name, file.read(), content_type)

    def to_json(self) -> dict[str, Any]:
        kind = self.content_type or mimetypes.guess_type(self.filename)[0]
        found = {"filename": self.filename, "content_type": kind,
                 "content": base64.b64encode(self.content).decode("ascii")}  # fmt: skip
        if self.content_id is not None:
            found["content_id"] = self.content_id
        return found


def content_id(value: Any) -> str | None:
    """A Content-ID header's value as the API takes it: without its angle brackets."""
    if value is None:
        return None
    found = str(value).strip()
    return found[1:-1] if found.startswith("<") and found.endswith(">") else found


def unnamed(content_type: str, number: int) -> str:
    """A name for the number-th attachment, given without one: the API needs a file name."""
    kind = content_type.split(";")[0].strip()
    return f"attachment-{number}{mimetypes.guess_extension(kind) or '.bin'}"


# What attachments= takes: Attachment, a path, a binary file, or (filename, bytes[, type]).
AttachmentLike = Attachment | str | os.PathLike[str] | IO[bytes] | tuple[Any, ...]


def attachment(item: AttachmentLike) -> Attachment:
    if isinstance(item, Attachment):
        return item
    if isinstance(item, str | os.PathLike):
        return Attachment.from_path(item)
    if isinstance(item, tuple):
        filename, content, *kind = item
        data = content.encode() if isinstance(content, str) else bytes(content)
        return Attachment(filename, data, kind[0] if kind else None)
    if hasattr(item, "read"):
        return Attachment.from_file(item)
    raise TypeError(f"an attachment is an Attachment, a path, a binary file or a tuple; "
                    f"got {type(item).__name__}")  # fmt: skip


# The header field the Django and Flask-Mail backends read a message's stream from (as
# outbox smtpd does), taken out of its headers.
STREAM_HEADER = "x-outbox-stream"


def stream_of(headers: Mapping[str, str], given: object = None) -> str | None:
    """A message's stream: given (message.stream), else its X-Outbox-Stream header."""
    if isinstance(given, str) and given:
        return given
    return next((v for k, v in headers.items() if k.lower() == STREAM_HEADER), None)


@dataclass
class Email:
    """One message; each field is the API's of the same name (sender is its "from")."""

    to: Addresses
    subject: str = ""
    text: str | None = None
    html: str | None = None
    sender: Address | None = None  # None: the server's default sender
    cc: Addresses | None = None
    bcc: Addresses | None = None
    reply_to: Address | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0  # higher goes first
    # "transactional" (one person's mail; the server's default) or "broadcast" (a newsletter):
    # the server sends transactional mail first and may suppress and route them apart.
    stream: str | None = None
    send_after: datetime | str | None = None  # a naive datetime is taken as UTC
    attachments: Iterable[AttachmentLike] = ()
    # Your own labels (an order id, say): given back in answers and webhook events, not sent.
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The message as the API's JSON body; fields left at their defaults are left out."""
        found: dict[str, Any] = {"to": mailboxes(self.to), "subject": self.subject}
        optional = {
            "from": mailbox(self.sender) if self.sender else None,
            "cc": mailboxes(self.cc) or None,
            "bcc": mailboxes(self.bcc) or None,
            "reply_to": mailbox(self.reply_to) if self.reply_to else None,
            "text": self.text,
            "html": self.html,
            "headers": dict(self.headers) or None,
            "priority": self.priority or None,
            "stream": self.stream,
            "send_after": utc_text(self.send_after),
            "attachments": [attachment(a).to_json() for a in self.attachments] or None,
            "metadata": dict(self.metadata) or None,
        }
        found.update({k: v for k, v in optional.items() if v is not None})
        return found


def utc_text(value: datetime | str | None) -> str | None:
    """A time as the API reads it: ISO 8601 in UTC (a naive datetime is UTC); text as given."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat() + "Z"
