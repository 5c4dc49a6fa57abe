"""The checks of a message's values: line breaks, storable text, headers, attachments.

Addresses are addresses.py's: parsed there once, into parts.
"""

import base64
import binascii
import mimetypes
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from outbox.core.addresses import LINE_BREAK as LINE_BREAK
from outbox.core.addresses import LINE_BREAK_ERROR as LINE_BREAK_ERROR
from outbox.core.addresses import LINE_BREAKS as LINE_BREAKS

# Neither a mail nor every database can hold these: NUL (PostgreSQL refuses it in text)
# and lone surrogates, which JSON's "\ud800" escapes let in and UTF-8 cannot encode.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
UNSTORABLE_ERROR = "must not contain NUL characters or lone surrogates"
ONE_LINE = f"^[^{LINE_BREAKS}]*$"  # as a JSON Schema pattern
MIME_TYPE = re.compile(r"^[\w.+-]{1,127}/[\w.+-]{1,127}$")  # RFC 6838: 127 characters each
# One parameter of a content type (RFC 2045 5.1): a token, "=", a token or a quoted string.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[^"\\\x00-\x1f\x7f]|\\[^\x00-\x1f\x7f])*"'
PARAMETER = re.compile(rf"\s*({_TOKEN})\s*=\s*({_TOKEN}|{_QUOTED})\s*")
CONTENT_TYPE_CHARS = 255  # the attachments.content_type column
FILENAME_CHARS = 255  # the attachments.filename column
# A Content-ID (RFC 2392) as stored, without its angle brackets: a msg-id's characters
# (RFC 5322 atext, dots and "@"). Senders often leave out the "@" ("<logo>"); readers
# take it so, and outbox does too. The attachments.content_id column holds 250.
_ID = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.@-]{1,250}"
CONTENT_ID = re.compile(_ID)
CONTENT_ID_ERROR = "must be 1 to 250 letters, digits, dots and !#$%&'*+-/=?^_`{|}~@, in <> or not"
ATTACHMENT_KEYS = ("filename", "content_type", "content", "content_id")
HEADER_NAME = re.compile(r"^[!-9;-~]{1,76}$")  # RFC 5322 field-name: printable, no colon
# Headers that outbox writes itself from the message's own fields.
RESERVED_HEADERS = {
    "from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id",
    "mime-version", "content-type", "content-transfer-encoding", "sender",
}  # fmt: skip


def line_break_problem(value: str) -> str | None:
    """What is wrong with a header value that holds a line break, or None."""
    return LINE_BREAK_ERROR if LINE_BREAK.search(value) else None


def unstorable(value: Any) -> bool:
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


def check_headers(value: Any) -> dict[str, str]:
    """Extra headers: names RFC 5322 takes, none outbox writes itself, one-line values."""
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
        if problem := line_break_problem(text):
            raise ValueError(f"the value of {name} {problem}")
        headers[name] = text
    return headers


# metadata: an app's own labels for a message, given back in answers and webhooks.
METADATA_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
METADATA_KEYS = 20
METADATA_VALUE_CHARS = 1000
# What the JSON Schema shows of check_metadata's value.
MetadataMap = Annotated[dict[str, str], WithJsonSchema({
    "type": "object",
    "maxProperties": METADATA_KEYS,
    "propertyNames": {"pattern": f"^{METADATA_KEY.pattern}$"},
    "additionalProperties": {"type": "string", "maxLength": METADATA_VALUE_CHARS},
})]  # fmt: skip


def check_metadata(value: Any) -> dict[str, str]:
    """An app's metadata: at most METADATA_KEYS string keys of 1 to 40 letters, digits
    and _.:- , each to a string of at most METADATA_VALUE_CHARS characters."""
    if value is None or value == {}:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("must be an object of keys to strings")
    if len(value) > METADATA_KEYS:
        raise ValueError(f"holds {len(value)} keys; at most {METADATA_KEYS}")
    found = {}
    for key, text in value.items():
        if not isinstance(key, str) or not METADATA_KEY.fullmatch(key):
            raise ValueError(f"{str(key)[:60]!r} is not a key: 1 to 40 letters, digits and _.:-")
        if not isinstance(text, str):
            raise ValueError(f"the value of {key} must be a string")
        if len(text) > METADATA_VALUE_CHARS:
            raise ValueError(f"the value of {key} is longer than {METADATA_VALUE_CHARS} characters")
        found[key] = text
    return found


@dataclass
class Upload:
    filename: str
    content_type: str
    data: bytes
    # An inline part's Content-ID, without <>: the HTML shows it as "cid:<content_id>".
    content_id: str | None = None


def check_content_id(value: Any) -> str | None:
    """A Content-ID as stored (no angle brackets), None for none; ValueError if malformed."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("content_id must be a string")
    found = value.strip()
    if found.startswith("<") and found.endswith(">"):
        found = found[1:-1]
    if not CONTENT_ID.fullmatch(found):
        raise ValueError(f"content_id {value[:60]!r} {CONTENT_ID_ERROR}")
    return found


def check_inline(uploads: list[Upload]) -> None:
    """ValueError naming a Content-ID given to two of a message's attachments."""
    seen: set[str] = set()
    for upload in uploads:
        if upload.content_id is None:
            continue
        if upload.content_id.lower() in seen:
            raise ValueError(f"content_id {upload.content_id!r} is given to two attachments")
        seen.add(upload.content_id.lower())


def check_upload(
    filename: str, content_type: str | None, data: bytes, content_id: Any = None
) -> Upload:
    """One attachment with a safe file name, a well-formed content type and, for an
    inline part, a well-formed Content-ID."""
    if problem := line_break_problem(filename):
        raise ValueError(f"file name {problem}")
    if UNSTORABLE.search(filename):
        raise ValueError(f"file name {UNSTORABLE_ERROR}")
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name:
        raise ValueError("every attachment needs a file name")
    if len(name) > FILENAME_CHARS:
        raise ValueError(f"file name {name[:40]!r}... is longer than {FILENAME_CHARS} characters")
    kind, *given = (content_type or "").split(";")
    kind = kind.strip().lower()
    if not kind or kind == "application/octet-stream":
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        given = []  # a guessed type takes no parameters given for another
    if not MIME_TYPE.match(kind):
        raise ValueError(f"{content_type!r} is not a content type")
    cid = check_content_id(content_id)
    return Upload(name, _with_parameters(kind, given, content_type or ""), data, cid)


def _with_parameters(kind: str, given: list[str], content_type: str) -> str:
    """The content type with the parameters given (a text file's charset), each checked."""
    found = []
    for parameter in filter(str.strip, given):
        match = PARAMETER.fullmatch(parameter)
        if match is None:
            raise ValueError(f"{parameter.strip()!r} in {content_type!r} is not a parameter")
        found.append(f"{match[1].lower()}={match[2]}")
    written = "; ".join([kind, *found])
    if len(written) > CONTENT_TYPE_CHARS:
        raise ValueError(f"content type {written[:40]!r}... is longer than {CONTENT_TYPE_CHARS}")
    return written


class Attachment(BaseModel):
    """A file attached to a message in JSON, as json_uploads reads it."""

    model_config = ConfigDict(regex_engine="python-re")  # Rust's \w makes a huge automaton
    filename: str = Field(
        min_length=1,
        pattern=ONE_LINE,
        description=f"Folders are dropped; at most {FILENAME_CHARS} characters.",
    )
    content_type: Annotated[str, Field(pattern=MIME_TYPE.pattern[:-1] + "(;.*)?$")] | None = Field(
        None, description="Guessed from the file name when missing."
    )
    # byte: OpenAPI 3.0's name for base64, which tools still read.
    content: str = Field(json_schema_extra={"format": "byte", "contentEncoding": "base64"})
    content_id: Annotated[str, Field(pattern=rf"^(?:<{_ID}>|{_ID})$")] | None = Field(
        None,
        description="Makes the file an inline part of the HTML, which shows it as"
        ' `<img src="cid:logo">` for content_id "logo" (RFC 2392). Unique in the message.',
    )


def json_uploads(value: Any) -> list[Upload]:
    """The checked uploads of a JSON list of {filename, content_type, content} objects."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("must be a list of {filename, content_type, content} objects")
    uploads = []
    for item in value:
        if not isinstance(item, Mapping) or not isinstance(item.get("filename"), str):
            raise ValueError("each attachment needs a filename")
        if unknown := sorted(str(key) for key in item if key not in ATTACHMENT_KEYS):
            raise ValueError(
                f"{item['filename']}: {', '.join(unknown)} is not a key of an attachment"
                f" (it takes {', '.join(ATTACHMENT_KEYS)})"
            )
        if not isinstance(item.get("content_type"), str | None):
            raise ValueError(f"{item['filename']}: content_type must be a string")
        content = item.get("content")
        if not isinstance(content, str):
            raise ValueError(f"{item['filename']}: content must be a base64 string")
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{item['filename']}: content is not valid base64") from None
        uploads.append(check_upload(item["filename"], item.get("content_type"), data,
                                    item.get("content_id")))  # fmt: skip
    check_inline(uploads)
    return uploads


def oversize(limit: int, size: int | None = None) -> str:
    """What a request or a message over MAX_MESSAGE_BYTES is told, by the API and the pages."""
    what = "the request" if size is None else f"bodies and attachments ({size} bytes)"
    return f"{what} over the limit of {limit} bytes (OUTBOX_MAX_MESSAGE_BYTES)"
