"""The message's fields, declared once: wire name, type, limits, error text and description."""

import difflib
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from outbox.core.addresses import Mailbox
from outbox.core.addresses import parse as parse_addresses
from outbox.core.checks import (
    HEADER_NAME,
    ONE_LINE,
    RESERVED_HEADERS,
    UNSTORABLE_ERROR,
    Attachment,
    MetadataMap,
    Upload,
    check_headers,
    check_metadata,
    json_uploads,
    line_break_problem,
    unstorable,
)
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.core.streams import Stream
from outbox.core.streams import parse as parse_stream

# The longest header line RFC 5322 allows, and the width of the subject, from and
# reply-to columns.
LINE_CHARS = 998
PRIORITY_RANGE = (-1_000_000, 1_000_000)
NO_RECIPIENT = "at least one recipient is required"
NO_BODY = "a text or an html body is required"

# What the JSON Schema shows of a field's value. An address is shown as the standard
# format email, which code generators and fuzzers know how to make; the description
# says what else parse_addresses reads (a display name, a comma-separated list), since
# a format of our own leaves every tool without a way to make a valid one.
OneLine = Annotated[str, Field(pattern=ONE_LINE, max_length=LINE_CHARS)]
MAILBOX_NOTE = "An email address, or a name and address: `Ann <ann@example.com>`."
LIST_NOTE = "Addresses as in from; a string may hold several, comma-separated."
MailboxText = Annotated[OneLine, Field(json_schema_extra={"format": "email"})]
MailboxListText = Annotated[str, Field(pattern=ONE_LINE, json_schema_extra={"format": "email"})]
HeaderMap = Annotated[dict[str, str], WithJsonSchema({
    "type": "object",
    "propertyNames": {"pattern": HEADER_NAME.pattern, "not": {"enum": sorted(RESERVED_HEADERS)}},
    "additionalProperties": {"type": "string", "pattern": ONE_LINE},
})]  # fmt: skip


def _text_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError("must be a string or a list of strings")


def _allowed(info: ValidationInfo) -> frozenset[str]:
    """The special-use domains build_draft passes in the context (ALLOWED_SPECIAL_DOMAINS)."""
    return info.context.get("allowed_domains", frozenset()) if info.context else frozenset()


def _recipients(value: Any, info: ValidationInfo) -> list[Mailbox]:
    return parse_addresses(_text_list(value), _allowed(info))


def _to(value: Any, info: ValidationInfo) -> list[Mailbox]:
    if not (found := _recipients(value, info)):
        raise ValueError(NO_RECIPIENT)
    return found


def _one_address(value: Any, what: str, allowed: frozenset[str]) -> Mailbox | None:
    found = parse_addresses(_text_list(value), allowed)
    if len(found) > 1:
        raise ValueError(f"takes one {what} address, got {len(found)}")
    if found and len(str(found[0])) > LINE_CHARS:
        raise ValueError(f"must be at most {LINE_CHARS} characters")
    return found[0] if found else None


@functools.lru_cache(maxsize=16)
def _default_sender(value: str, allowed: frozenset[str]) -> tuple[Mailbox | None, str | None]:
    """The configured default sender, checked once: (address, None) or (None, problem)."""
    try:
        return _one_address(value, "sender", allowed), None
    except ValueError as exc:
        return None, str(exc)


def _sender(value: Any, info: ValidationInfo) -> Mailbox | None:
    """The sender given, or else the default one build_draft passes in the context."""
    if found := _one_address(value, "sender", _allowed(info)):
        return found
    default = info.context["default_sender"] if info.context else None
    if not default:
        raise ValueError("required: no default sender is configured")
    sender, problem = _default_sender(default, _allowed(info))
    if problem:
        raise ValueError(f"required: the configured default sender is unusable ({problem})")
    return sender


def _optional_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _subject(value: Any) -> str:
    subject = _optional_text(value) or ""
    if problem := line_break_problem(subject):
        raise ValueError(problem)
    if len(subject) > LINE_CHARS:
        raise ValueError(f"must be at most {LINE_CHARS} characters")
    return subject


def _text(value: Any, info: ValidationInfo) -> str | None:
    """The text body; info.data holds html, checked first, unless html is bad itself."""
    text = _optional_text(value)
    if text is None and "html" in info.data and info.data["html"] is None:
        raise ValueError(NO_BODY)
    return text


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


def utc_moment(value: Any) -> datetime | None:
    """An ISO 8601 time as the naive UTC the tables hold (no zone means UTC); None for none."""
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


def _checked(check: Callable[..., Any], shape: Any) -> PlainValidator:
    """A field's own check; shape is what the JSON Schema shows of the value it takes."""
    return PlainValidator(check, json_schema_input_type=shape)


Listed = MailboxListText | list[MailboxListText]
AtLeastOne = MailboxListText | Annotated[list[MailboxListText], Field(min_length=1)]
Priority = Annotated[int, Field(ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1])]
StreamName = Annotated[str, Field(json_schema_extra={"enum": [s.value for s in Stream]})]


def _stream(value: Any) -> Stream:
    return DEFAULT_STREAM if value is None or value == "" else parse_stream(value)


def _reply_to(value: Any, info: ValidationInfo) -> Mailbox | None:
    return _one_address(value, "reply-to", _allowed(info))


class NewMessage(BaseModel):
    """A message as a client hands it in; each attribute is the Draft attribute it becomes.

    Each check raises ValueError with the field's error text, and every field is checked,
    so one answer names all the bad ones. html comes before text: the check of text
    reads the checked html to tell whether the message has a body.
    """

    # Beyond the fields: a message needs a recipient and a body (_to and _text say so).
    # The body's need is said in words, not as an anyOf at the top: code generators make
    # that a union of its branches and drop the other fields. A field it does not know
    # is an error (a misspelt "subjet" would otherwise queue a mail without a subject).
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "description": "A message to queue: to at least one recipient, with a text or an html"
        " body, or both.",
        "required": ["to"],
    })  # fmt: skip

    to: Annotated[list[Mailbox], _checked(_to, AtLeastOne)] = Field(
        default_factory=list, validate_default=True, title="To",
        description=f"At least one. {LIST_NOTE}",
    )  # fmt: skip
    cc: Annotated[list[Mailbox], _checked(_recipients, Listed | None)] = Field(
        default_factory=list, title="Cc", description=LIST_NOTE
    )
    bcc: Annotated[list[Mailbox], _checked(_recipients, Listed | None)] = Field(
        default_factory=list, title="Bcc", description=LIST_NOTE
    )
    from_addr: Annotated[Mailbox | None, _checked(_sender, MailboxText | None)] = Field(
        None, alias="from", validate_default=True, title="From",
        description=f"{MAILBOX_NOTE} Default: the default sender.",
    )  # fmt: skip
    reply_to: Annotated[Mailbox | None, _checked(_reply_to, MailboxText | None)] = Field(
        None, title="Reply-To", description=MAILBOX_NOTE
    )
    subject: Annotated[str, _checked(_subject, OneLine | None)] = Field("", title="Subject")
    html: Annotated[str | None, _checked(_optional_text, str | None)] = Field(
        None, title="HTML body"
    )
    text: Annotated[str | None, _checked(_text, str | None)] = Field(
        None, validate_default=True, title="Text body",
        description="A text or an html body is required.",
    )  # fmt: skip
    priority: Annotated[int, _checked(_priority, Priority | None)] = Field(
        0, title="Priority", description="Higher goes first; 0 if not given."
    )
    stream: Annotated[Stream, _checked(_stream, StreamName | None)] = Field(
        DEFAULT_STREAM, title="Stream",
        description="transactional (one person's mail: a receipt, a password reset; the"
        " default) or broadcast (a newsletter). Transactional mail is sent first.",
    )  # fmt: skip
    send_after: Annotated[datetime | None, _checked(utc_moment, datetime | None)] = Field(
        None, title="Send after (UTC)", description="ISO 8601; a time without a zone is UTC."
    )
    headers: Annotated[dict[str, str], _checked(check_headers, HeaderMap | None)] = Field(
        default_factory=dict, title="Headers",
        description="Extra headers; not those outbox writes itself (any case).",
    )  # fmt: skip
    attachments: Annotated[list[Upload], _checked(json_uploads, list[Attachment] | None)] = Field(
        default_factory=list, title="Attachments"
    )
    metadata: Annotated[dict[str, str], _checked(check_metadata, MetadataMap | None)] = Field(
        default_factory=dict, title="Metadata",
        description="The app's own labels for the message (an order id, say), given back as"
        " they came in its answers and in every webhook event of it. Not sent in the mail.",
    )  # fmt: skip

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        """The check every field takes first."""
        if unstorable(value):
            raise ValueError(UNSTORABLE_ERROR)
        return value


# Each field's name on the wire, by attribute: pydantic names a checked default (a
# missing "from") by its attribute.
WIRE_NAMES = {name: field.alias or name for name, field in NewMessage.model_fields.items()}


def unknown_field(name: str) -> str:
    """What is wrong with a field the message does not have, with the likely one meant."""
    close = difflib.get_close_matches(name, WIRE_NAMES.values(), n=1)
    return "is not a field of a message" + (f"; did you mean {close[0]}?" if close else "")


def field_errors(exc: ValidationError) -> dict[str, str]:
    """The error text of each bad field, keyed by its name on the wire."""
    found = {}
    for error in exc.errors():
        name = str(error["loc"][0])
        if error["type"] == "extra_forbidden":
            found[name] = unknown_field(name)
        else:
            found[WIRE_NAMES.get(name, name)] = str(error["ctx"]["error"])
    return found


def _form_kind(annotation: Any) -> str | None:
    if annotation == list[Mailbox]:
        return "repeated"  # a form repeats the field for several values
    if annotation == list[Upload]:
        return "files"  # in multipart only
    return None if annotation == dict[str, str] else "text"


# How an HTML form (urlencoded, multipart, the compose page) carries each field it can:
# objects (headers) only come in JSON.
FORM_KINDS = {
    WIRE_NAMES[name]: kind
    for name, field in NewMessage.model_fields.items()
    if (kind := _form_kind(field.annotation))
}
