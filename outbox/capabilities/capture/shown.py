"""A captured mail as its recipient would see it: headers, text and HTML parts, attachments."""

from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import cast


@dataclass(frozen=True)
class Attachment:
    """One attachment of a captured mail: its place among them, name, type and size."""

    index: int
    filename: str
    content_type: str
    size: int


@dataclass
class Shown:
    """What the page shows of one captured mail; problem says why a part could not be read."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    text: str | None = None
    html: str | None = None
    attachments: list[Attachment] = field(default_factory=list)
    problem: str | None = None


def _parsed(raw: bytes) -> EmailMessage:
    return cast(EmailMessage, message_from_bytes(raw, policy=policy.default))


def read(raw: bytes) -> Shown:
    """The parts of a captured mail; a mail that cannot be read says why, headers kept."""
    shown = Shown()
    try:
        mail = _parsed(raw)
        shown.headers = [(name, str(value)) for name, value in mail.items()]
        for kind in ("plain", "html"):
            part = mail.get_body(preferencelist=(kind,))
            if part is not None:
                setattr(shown, "text" if kind == "plain" else "html", part.get_content())
        for n, part in enumerate(mail.iter_attachments()):
            data = part.get_payload(decode=True)
            data = data if isinstance(data, bytes) else b""
            shown.attachments.append(Attachment(n, part.get_filename() or f"attachment-{n + 1}",
                                                part.get_content_type(), len(data)))  # fmt: skip
    except (LookupError, ValueError, RecursionError) as exc:
        shown.problem = f"the mail cannot be read: {exc.__class__.__name__}"
    return shown


def attachment(raw: bytes, index: int) -> tuple[str, str, bytes] | None:
    """The index-th attachment's file name, content type and bytes, or None."""
    try:
        parts = list(_parsed(raw).iter_attachments())
    except (LookupError, ValueError, RecursionError):
        return None
    if not 0 <= index < len(parts):
        return None
    part = parts[index]
    data = part.get_payload(decode=True)
    data = data if isinstance(data, bytes) else b""
    return part.get_filename() or f"attachment-{index + 1}", part.get_content_type(), data
