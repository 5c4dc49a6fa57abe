"""What the API answers, as dataclasses: a message, its recipients, attempts, a page."""

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


def _time(value: str | None) -> datetime | None:
    """An answer's time (ISO 8601, Z) as an aware UTC datetime."""
    return datetime.fromisoformat(value) if value else None


def _known(cls: type[T], found: dict[str, Any]) -> dict[str, Any]:
    """The keys of found that cls has: a newer server may tell more than this client knows."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return {k: v for k, v in found.items() if k in names}


@dataclass(frozen=True)
class Recipient:
    """One recipient and where its delivery stands (pending, sent, refused, ...)."""

    kind: str  # to, cc or bcc
    address: str
    name: str
    state: str
    code: int | None  # the server's last reply code for it, if it refused it
    reply: str | None
    attempts: int


@dataclass(frozen=True)
class Message:
    """A message as the API tells of it; sender is the answer's "from"."""

    id: int
    message_id: str
    status: str
    sender: str
    to: list[str]
    cc: list[str]
    bcc: list[str]
    reply_to: str | None
    subject: str
    priority: int
    attempts: int
    max_attempts: int
    created_at: datetime
    send_after: datetime | None
    next_attempt_at: datetime | None
    last_retry: datetime | None
    last_error: str | None
    sent_at: datetime | None
    recipients: list[Recipient]
    partly_delivered: bool
    note: str | None = None  # after resend or cancel: why it waits, if it does
    mailing_id: int | None = None  # a mailing's recipient: the mailing (an older outbox: None)
    metadata: dict[str, str] = field(default_factory=dict)  # the labels it was sent with
    stream: str = "transactional"  # an older outbox, without streams: transactional

    @classmethod
    def from_json(cls, found: dict[str, Any]) -> "Message":
        return cls(**_message_fields(cls, found))


@dataclass(frozen=True)
class AttachmentInfo:
    """An attachment as the API tells of it: never its content."""

    filename: str
    content_type: str
    size: int  # bytes
    content_id: str | None = None  # an inline part's, without <>


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt to send a message, and what it ended in."""

    started_at: datetime
    finished_at: datetime
    outcome: str
    smtp_code: int | None
    error: str | None
    reply: str | None
    route: str | None = None


@dataclass(frozen=True)
class MessageDetail(Message):
    """A message with its attachments and every attempt made to send it, oldest first."""

    attachments: list[AttachmentInfo] = field(default_factory=list)
    attempt_log: list[AttemptInfo] = field(default_factory=list)
    queued_to_sent_ms: int | None = None  # from storing it to the SMTP server's 250

    @classmethod
    def from_json(cls, found: dict[str, Any]) -> "MessageDetail":
        fields = _message_fields(cls, found)
        fields["attachments"] = [AttachmentInfo(**_known(AttachmentInfo, a))
                                 for a in found.get("attachments", [])]  # fmt: skip
        fields["attempt_log"] = [_attempt(a) for a in found.get("attempt_log", [])]
        return cls(**fields)


def _attempt(found: dict[str, Any]) -> AttemptInfo:
    fields = _known(AttemptInfo, found)
    for name in ("started_at", "finished_at"):
        fields[name] = _time(fields[name])
    return AttemptInfo(**fields)


def _message_fields(cls: type, found: dict[str, Any]) -> dict[str, Any]:
    fields = _known(cls, {**found, "sender": found.get("from")})
    for name in ("created_at", "send_after", "next_attempt_at", "last_retry", "sent_at"):
        fields[name] = _time(fields.get(name))
    fields["recipients"] = [Recipient(**_known(Recipient, r)) for r in found["recipients"]]
    fields.pop("attachments", None)
    fields.pop("attempt_log", None)
    return fields


@dataclass(frozen=True)
class Queued:
    """A message a batch queued: its id and the Message-ID it will be sent with."""

    id: int
    message_id: str


@dataclass(frozen=True)
class Page:
    """One page of a listing, newest first; before is what asks for the next, None at the end."""

    messages: list[Message]
    before: int | None
