"""Checking a message handed to outbox, from any source, before it is queued."""

import base64
import binascii
import functools
import hashlib
import json
import mimetypes
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import addresses
from .addresses import LINE_BREAK, LINE_BREAK_PROBLEM, Mailbox

# Headers that outbox writes itself from the message's own fields.
RESERVED_HEADERS = {
    "from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id",
    "mime-version", "content-type", "content-transfer-encoding", "sender",
}  # fmt: skip
# Neither a mail nor every database can hold these: NUL (PostgreSQL refuses it in text)
# and lone surrogates, which JSON's "\ud800" escapes let in and UTF-8 cannot encode.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
HEADER_NAME = re.compile(r"^[!-9;-~]{1,76}$")  # RFC 5322 field-name: printable, no colon
MIME_TYPE = re.compile(r"^[\w.+-]{1,127}/[\w.+-]{1,127}$")  # RFC 6838: 127 characters each
# The longest header line RFC 5322 allows, and the width of the subject, from and
# reply-to columns.
LINE_CHARS = 998
PRIORITY_RANGE = (-1_000_000, 1_000_000)


class DraftError(Exception):
    """One or more fields are wrong; errors maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass
class Upload:
    filename: str
    content_type: str
    data: bytes


@dataclass
class Draft:
    """A checked message, ready for queue.enqueue."""

    from_addr: Mailbox
    to: list[Mailbox]
    cc: list[Mailbox] = field(default_factory=list)
    bcc: list[Mailbox] = field(default_factory=list)
    reply_to: Mailbox | None = None
    subject: str = ""
    text: str | None = None
    html: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    send_after: datetime | None = None
    attachments: list[Upload] = field(default_factory=list)

    def size(self) -> int:
        """Bytes of bodies and attachments, the part limited by MAX_MESSAGE_BYTES."""
        bodies = len((self.text or "").encode()) + len((self.html or "").encode())
        return bodies + sum(len(a.data) for a in self.attachments)

    def fingerprint(self) -> str:
        """A digest of the whole content, to tell a true repeat from a reused key."""
        digest = hashlib.sha256()
        fields = {k: v for k, v in self.__dict__.items() if k != "attachments"}
        fields["send_after"] = self.send_after.isoformat() if self.send_after else None
        # Each address as a person writes it, as the digest has always taken them.
        for name in ("from_addr", "reply_to"):
            fields[name] = str(fields[name]) if fields[name] else None
        for name in ("to", "cc", "bcc"):
            fields[name] = [str(mailbox) for mailbox in fields[name]]
        digest.update(json.dumps(fields, sort_keys=True).encode())
        for upload in self.attachments:
            digest.update(f"\0{upload.filename}\0{upload.content_type}\0".encode())
            digest.update(hashlib.sha256(upload.data).digest())
        return digest.hexdigest()


def _no_line_breaks(value: str) -> str | None:
    return LINE_BREAK_PROBLEM if LINE_BREAK.search(value) else None


def _unstorable(value: Any) -> bool:
    """Whether any string in a field's value, however nested, holds NUL or a lone surrogate."""
    pending = [value]  # a loop, not recursion: JSON may nest as deep as its decoder allows
    while pending:
        item = pending.pop()
        if isinstance(item, str) and UNSTORABLE.search(item):
            return True
        if isinstance(item, Mapping):
            pending.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            pending.extend(item)
    return False


def parse_addresses(values: Iterable[str]) -> list[Mailbox]:
    """Addresses from strings that may each hold a comma-separated list."""
    return addresses.parse(values)


def _text_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError("must be a string or a list of strings")


def _one_address(value: Any, what: str) -> Mailbox | None:
    found = parse_addresses(_text_list(value))
    if len(found) > 1:
        raise ValueError(f"takes one {what} address, got {len(found)}")
    return found[0] if found else None


def _optional_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _priority(value: Any) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one kind of number: 5.0 is the whole number 5
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("must be a whole number")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None
    low, high = PRIORITY_RANGE
    if not low <= number <= high:
        raise ValueError(f"must be between {low} and {high}")
    return number


def _send_after(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 date and time")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 date and time") from None
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            raise ValueError(f"{value!r} is out of range in UTC") from None
    return moment


def _headers(value: Any) -> dict[str, str]:
    if value is None or value == {}:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("must be an object of header names to values")
    headers = {}
    for name, text in value.items():
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid header name")
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"{name} is set by outbox from the message's own fields")
        if not isinstance(text, str):
            raise ValueError(f"the value of {name} must be a string")
        if problem := _no_line_breaks(text):
            raise ValueError(f"the value of {name} {problem}")
        headers[name] = text
    return headers


def check_upload(filename: str, content_type: str | None, data: bytes) -> Upload:
    """One attachment with a safe file name and a well-formed content type."""
    if problem := _no_line_breaks(filename):
        raise ValueError(f"file name {problem}")
    if UNSTORABLE.search(filename):
        raise ValueError("file name must not contain NUL characters or lone surrogates")
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name:
        raise ValueError("every attachment needs a file name")
    if len(name) > 255:
        raise ValueError(f"file name {name[:40]!r}... is longer than 255 characters")
    kind = (content_type or "").split(";")[0].strip().lower()
    if not kind or kind == "application/octet-stream":
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if not MIME_TYPE.match(kind):
        raise ValueError(f"{content_type!r} is not a content type")
    return Upload(name, kind, data)


def _json_attachments(value: Any) -> list[Upload]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("must be a list of {filename, content_type, content} objects")
    uploads = []
    for item in value:
        if not isinstance(item, Mapping) or not isinstance(item.get("filename"), str):
            raise ValueError("each attachment needs a filename")
        if not isinstance(item.get("content_type"), str | None):
            raise ValueError(f"{item['filename']}: content_type must be a string")
        content = item.get("content")
        if not isinstance(content, str):
            raise ValueError(f"{item['filename']}: content must be a base64 string")
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{item['filename']}: content is not valid base64") from None
        uploads.append(check_upload(item["filename"], item.get("content_type"), data))
    return uploads


@functools.lru_cache(maxsize=16)
def _default_sender(value: str) -> tuple[Mailbox | None, str | None]:
    """The configured default sender, checked once: (address, None) or (None, problem)."""
    try:
        return _one_address(value, "sender"), None
    except ValueError as exc:
        return None, str(exc)


def build_draft(fields: Mapping[str, Any], default_sender: str | None) -> Draft:
    """Check every field at once; raise DraftError naming each bad one."""
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}

    def take(name: str, key: str, check: Any, *args: Any) -> None:
        if _unstorable(fields.get(key)):
            errors[key] = "must not contain NUL characters or lone surrogates"
            return
        try:
            values[name] = check(fields.get(key), *args)
        except ValueError as exc:
            errors[key] = str(exc)

    for name in ("to", "cc", "bcc"):
        take(name, name, lambda v: parse_addresses(_text_list(v)))
    take("from_addr", "from", _one_address, "sender")
    take("reply_to", "reply_to", _one_address, "reply-to")
    take("subject", "subject", lambda v: _optional_text(v) or "")
    take("text", "text", _optional_text)
    take("html", "html", _optional_text)
    take("priority", "priority", _priority)
    take("send_after", "send_after", _send_after)
    take("headers", "headers", _headers)
    take("attachments", "attachments", _json_attachments)

    if "subject" in values and (problem := _no_line_breaks(values["subject"])):
        errors["subject"] = problem
    for key, name in (("subject", "subject"), ("from", "from_addr"), ("reply_to", "reply_to")):
        if len(str(values.get(name) or "")) > LINE_CHARS and key not in errors:
            errors[key] = f"must be at most {LINE_CHARS} characters"
    if "to" in values and not values["to"]:
        errors["to"] = "at least one recipient is required"
    if "text" in values and "html" in values and not (values["text"] or values["html"]):
        errors["text"] = "a text or an html body is required"
    if "from_addr" in values and values["from_addr"] is None:
        if not default_sender:
            errors["from"] = "required: no default sender is configured"
        else:
            sender, problem = _default_sender(default_sender)
            if problem:
                errors["from"] = f"required: the configured default sender is unusable ({problem})"
            values["from_addr"] = sender
    if errors:
        raise DraftError(errors)
    return Draft(**values)
