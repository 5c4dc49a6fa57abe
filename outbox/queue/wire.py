"""The API's wire facts beyond the message's fields: its keys, a batch's size, what it shows."""

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from outbox import models
from outbox.core.addresses import Kind
from outbox.core.latency import in_ms, queue_to_sent
from outbox.core.recipients import Recipient as Entry
from outbox.core.recipients import State, by_kind, partly_delivered, state
from outbox.core.status import CLAIMABLE, Outcome, Status
from outbox.core.streams import Stream

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
BATCH_LIMIT = 1000  # messages in one batch request
# Shorter than a single message's key: each message of a batch stores the key with its
# place in the batch appended, within the same 255-character column.
BATCH_KEY = re.compile(r"^[\x21-\x7e]{1,250}$")
PAGE_LIMIT = 50  # messages in a page of GET /api/messages unless the client asks otherwise
MAX_PAGE_LIMIT = 200


class Recipient(BaseModel):
    """One recipient and where its delivery stands (recipients.State)."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind
    address: str
    name: str
    state: State
    code: int | None  # the server's last reply code for it, if it refused it
    reply: str | None  # that reply's text, or why it could not be sent to
    attempts: int  # attempts that tried it


class Message(BaseModel):
    """What the API tells about a message; each attribute is the column it shows, or, for
    the addresses, the parts stored for them (from, and to, cc and bcc as lists)."""

    model_config = ConfigDict(extra="forbid")

    id: int
    message_id: str
    status: Status
    from_addr: str = Field(alias="from")
    to: list[str]
    cc: list[str]
    bcc: list[str]
    reply_to: str | None
    subject: str
    priority: int
    stream: Stream  # core.streams
    attempts: int
    max_attempts: int
    created_at: datetime
    send_after: datetime | None
    # When a worker may next take it: null once nothing is due (sending, sent, failed,
    # cancelled).
    next_attempt_at: datetime | None
    last_retry: datetime | None
    last_error: str | None
    sent_at: datetime | None
    recipients: list[Recipient]
    # Some recipients have the mail and others do not (yet): a sent message some of whose
    # recipients were refused, or a deferred one some of whose recipients accepted it.
    partly_delivered: bool
    # mailings: the mailing this recipient's row was made for, else null; its bodies
    # are the mailing's (GET /api/mailings/{id}), its subject the one it gets.
    mailing_id: int | None
    # The app's own labels, as it gave them ({} if none).
    meta: dict[str, str] = Field(alias="metadata")


class AttachmentInfo(BaseModel):
    """An attachment as an answer tells of it: what it is, never its content."""

    model_config = ConfigDict(extra="forbid")

    filename: str
    content_type: str
    size: int  # bytes
    content_id: str | None = None  # an inline part's, without <>; None: an attachment


class AttemptInfo(BaseModel):
    """One attempt to send a message, and what it ended in."""

    model_config = ConfigDict(extra="forbid")

    started_at: datetime
    finished_at: datetime
    outcome: Outcome
    smtp_code: int | None  # the server's reply code, if it gave one
    error: str | None  # the server's refusal, or why the attempt failed
    reply: str | None  # the server's words when it took the mail (its queue id, often)
    route: str | None  # the route it went through (None: an attempt older than routes)


class MessageDetail(Message):
    """A message with its attachments and every attempt made to send it, oldest first."""

    attachments: list[AttachmentInfo]
    attempt_log: list[AttemptInfo]
    # Milliseconds from storing the message to the SMTP server's 250 for it, retries
    # and any send_after wait included; null until it is sent.
    queued_to_sent_ms: int | None


class Moved(Message):
    """A message after a move (resend, cancel), with a note when it waits for its time."""

    note: str | None


# (name in the answer, column, whether a time) of each field of Message.
_SHOWN = tuple(
    (field.alias or name, name, field.annotation in (datetime, datetime | None))
    for name, field in Message.model_fields.items()
)


def iso(moment: datetime | None, timespec: str = "seconds") -> str | None:
    """A stored (naive UTC) time as the answers write it: ISO 8601, seconds, Z (the
    webhooks' payloads keep microseconds)."""
    return moment.isoformat(timespec=timespec) + "Z" if moment else None


# The answer's address fields, made from the stored parts; the rest are columns as they are.
ADDRESSES = {"from_addr", "reply_to", *(kind.value for kind in Kind), "recipients",
             "partly_delivered", "meta"}  # fmt: skip
_COLUMNS = [(name, column) for name, column, is_time in _SHOWN
            if not is_time and column not in ADDRESSES]  # fmt: skip
_TIMES = [(name, column) for name, column, is_time in _SHOWN if is_time]
WAITING = {status.value for status in CLAIMABLE}


def message_json(message: models.Message) -> dict[str, Any]:
    """What the API tells about a stored message: the fields of Message, times in UTC."""
    found = {name: getattr(message, column) for name, column in _COLUMNS}
    found.update({name: iso(getattr(message, column)) for name, column in _TIMES})
    if message.status not in WAITING:
        found["next_attempt_at"] = None
    for kind, mailboxes in by_kind(message.recipients).items():
        found[kind.value] = [str(mailbox) for mailbox in mailboxes]
    found["from"] = str(message.sender)
    found["reply_to"] = str(message.reply_to_mailbox) if message.reply_to else None
    found["recipients"] = [recipient_json(entry, message) for entry in message.recipients]
    found["partly_delivered"] = partly_delivered(message.recipients, message.status)
    found["metadata"] = message.meta or {}
    return found


def recipient_json(entry: Entry, message: models.Message) -> dict[str, Any]:
    """One entry of the recipients column as the answer's Recipient."""
    own = entry.state is not None
    return {
        "kind": entry.kind.value,
        "address": entry.address,
        "name": entry.name or "",
        "state": state(entry, message.status).value,
        "code": entry.code,
        "reply": entry.reply,
        "attempts": entry.attempts if own else message.attempts,
    }


def detail_json(
    message: models.Message, attachments: list[models.Attachment], attempts: list[models.Attempt]
) -> dict[str, Any]:
    """The answer's MessageDetail: the message, its attachments' names and sizes, its attempts."""
    found = message_json(message)
    found["attachments"] = [
        {
            "filename": a.filename,
            "content_type": a.content_type,
            "size": a.size,
            "content_id": a.content_id,
        }
        for a in attachments
    ]
    found["attempt_log"] = [
        {"started_at": iso(a.started_at), "finished_at": iso(a.finished_at),
         "outcome": a.outcome, "smtp_code": a.smtp_code, "error": a.error, "reply": a.reply,
         "route": a.route}
        for a in attempts
    ]  # fmt: skip
    found["queued_to_sent_ms"] = in_ms(queue_to_sent(message.created_at, message.sent_at))
    return found
