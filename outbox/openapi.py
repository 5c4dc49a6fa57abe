"""The OpenAPI 3.1 description of the HTTP API in api.py, served at /api/openapi.json."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from .checks import LINE_BREAKS
from .schema import HEADER_NAME, LINE_CHARS, PRIORITY_RANGE, RESERVED_HEADERS
from .status import Status

Schema = dict[str, Any]

# api.IDEMPOTENCY_KEY, BATCH_KEY and BATCH_LIMIT, written out here because api.py
# imports this module.
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,255}$"
BATCH_KEY = r"^[\x21-\x7e]{1,250}$"
BATCH_LIMIT = 1000
ONE_LINE = f"^[^{LINE_BREAKS}]*$"
# Formats of our own (OpenAPI leaves format open): RFC 5322 terms for what
# drafts.parse_addresses reads, each address with or without a display name.
MAILBOX: Schema = {"type": "string", "format": "mailbox", "pattern": ONE_LINE}
MAILBOX_LIST: Schema = {"type": "string", "format": "mailbox-list", "pattern": ONE_LINE}
TO: Schema = {"anyOf": [MAILBOX_LIST, {"type": "array", "items": MAILBOX_LIST, "minItems": 1}]}
RECIPIENTS: Schema = {"anyOf": [*TO["anyOf"], {"type": "array", "maxItems": 0}, {"type": "null"}]}
WHEN: Schema = {"type": ["string", "null"], "format": "date-time"}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/{name}"}


def _message_fields(form: bool) -> dict[str, Schema]:
    """The fields of POST /api/messages; a form has no headers and sends only text."""
    low, high = PRIORITY_RANGE
    # A form repeats the field for several values.
    listed = {"type": "array", "items": MAILBOX_LIST}
    to, copies = ({**listed, "minItems": 1}, listed) if form else (TO, RECIPIENTS)
    fields: dict[str, Schema] = {
        "to": {**to, "description": "At least one address."},
        "cc": copies,
        "bcc": copies,
        "from": {**MAILBOX, "maxLength": LINE_CHARS, "description": "Default: the default sender."},
        "reply_to": {**MAILBOX, "maxLength": LINE_CHARS},
        "subject": {"type": "string", "maxLength": LINE_CHARS, "pattern": ONE_LINE},
        "text": {"type": "string", "description": "A text or an html body is required."},
        "html": {"type": "string"},
        "priority": {
            "type": "integer",
            "minimum": low,
            "maximum": high,
            "default": 0,
            "description": "Higher goes first.",
        },
        "send_after": {
            "type": "string",
            "format": "date-time",
            "description": "ISO 8601; a time without a zone is UTC.",
        },
    }
    if form:
        fields["priority"] = {"type": "string", "pattern": r"^[-+]?[0-9]{1,6}$"}
        return fields
    for name in ("from", "reply_to", "subject", "text", "html", "send_after"):
        fields[name] = {**fields[name], "type": ["string", "null"]}
    fields["headers"] = {
        "type": "object",
        "description": "Extra headers; not those outbox writes itself (any case).",
        "propertyNames": {
            "pattern": HEADER_NAME.pattern,
            "not": {"enum": sorted(RESERVED_HEADERS)},
        },
        "additionalProperties": {"type": "string", "pattern": ONE_LINE},
    }
    fields["attachments"] = {"type": "array", "items": _ref("schemas/Attachment")}
    return fields


def _json_message() -> Schema:
    """One message as a JSON object."""
    a_body = [
        {"required": [name], "properties": {name: {"type": "string", "minLength": 1}}}
        for name in ("text", "html")
    ]
    return {
        "type": "object",
        "required": ["to"],
        "anyOf": a_body,
        "properties": _message_fields(form=False),
    }


def _request_body() -> Schema:
    json_body = _json_message()
    form_body = {**json_body, "properties": _message_fields(form=True)}
    files = {
        "type": "array",
        "items": {"type": "string", "contentMediaType": "application/octet-stream"},
    }
    multipart = {**form_body, "properties": {**form_body["properties"], "attachments": files}}
    return {
        "required": True,
        "content": {
            "application/json": {"schema": json_body},
            "application/x-www-form-urlencoded": {"schema": form_body},
            "multipart/form-data": {"schema": multipart},
        },
    }


def _answer(description: str, schema: str, **headers: str) -> Schema:
    """A JSON response with a schema from components and headers from there too."""
    answer: Schema = {
        "description": description,
        "content": {"application/json": {"schema": _ref(f"schemas/{schema}")}},
    }
    if headers:
        answer["headers"] = {name: _ref(f"headers/{ref}") for name, ref in headers.items()}
    return answer


UNAUTHORIZED = _answer("No valid token.", "Error", **{"WWW-Authenticate": "WWW-Authenticate"})
UNAVAILABLE = _answer(
    "The database cannot be reached; retry with the same Idempotency-Key.",
    "Error",
    **{"Retry-After": "Retry-After"},
)
NOT_FOUND = _answer("No such message.", "Error")
MESSAGE_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


def _move(summary: str) -> Schema:
    return {
        "summary": summary,
        "parameters": [MESSAGE_ID],
        "responses": {
            "200": _answer("The message after the move.", "Message"),
            "401": UNAUTHORIZED,
            "404": NOT_FOUND,
            "409": _answer("Not allowed from the message's status.", "MoveRefused"),
            "503": UNAVAILABLE,
        },
    }


def _create() -> Schema:
    key = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY},
        "description": "Per token: a repeat answers the first message and queues nothing.",
    }
    created = _answer(
        "Queued, with all its attachments.",
        "Message",
        Location="Location",
        **{"Idempotent-Replayed": "Idempotent-Replayed"},
    )
    return {
        "summary": "Queue a message",
        "parameters": [key],
        "requestBody": _request_body(),
        "responses": {
            "201": created,
            "400": _answer(
                "Not a JSON object, form or multipart; a bad Idempotency-Key.", "BadRequest"
            ),
            "401": UNAUTHORIZED,
            "409": _answer("The Idempotency-Key was used for another message.", "KeyReused"),
            "413": _answer("Over MAX_MESSAGE_BYTES.", "Error"),
            "422": _answer("Bad fields, each named with what is wrong.", "BadFields"),
            "503": UNAVAILABLE,
        },
    }


def _create_batch() -> Schema:
    key = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": BATCH_KEY},
        "description": "Per token, apart from the keys of single messages: a repeat of the "
        "batch answers the first one and queues nothing.",
    }
    batch = {
        "type": "object",
        "required": ["messages"],
        "properties": {
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": BATCH_LIMIT,
                "items": _json_message(),
                "description": "Checked as POST /api/messages checks one message; "
                "attachments are stored as there.",
            }
        },
    }
    created = _answer(
        "All queued; ids in request order.",
        "Batch",
        **{"Idempotent-Replayed": "Idempotent-Replayed"},
    )
    return {
        "summary": f"Queue 1 to {BATCH_LIMIT} messages: all of them, or none",
        "parameters": [key],
        "requestBody": {"required": True, "content": {"application/json": {"schema": batch}}},
        "responses": {
            "201": created,
            "400": _answer("Not a JSON object with a messages list; a bad Idempotency-Key.",
                           "BatchRefused"),
            "401": UNAUTHORIZED,
            "409": _answer("The Idempotency-Key was used for another batch.", "KeyReused"),
            "413": _answer(f"Over {BATCH_LIMIT} messages, or a message over MAX_MESSAGE_BYTES.",
                           "BatchRefused"),
            "422": _answer("No messages, or bad ones, each named by index and field.",
                           "BatchRefused"),
            "503": UNAVAILABLE,
        },
    }  # fmt: skip


def _schemas() -> dict[str, Schema]:
    when: Schema = {"type": "string", "format": "date-time"}
    message: dict[str, Schema] = {
        "id": {"type": "integer"},
        "message_id": {"type": "string"},
        "status": {"enum": [s.value for s in Status]},
        "from": {"type": "string"},
        "to": {"type": "string"},
        "subject": {"type": "string"},
        "priority": {"type": "integer"},
        "attempts": {"type": "integer"},
        "max_attempts": {"type": "integer"},
        "created_at": when,
        "send_after": WHEN,
        "next_attempt_at": when,
        "last_retry": WHEN,
        "last_error": {"type": ["string", "null"]},
        "sent_at": WHEN,
    }
    error = {"error": {"type": "string"}}
    errors = {"type": "object", "additionalProperties": {"type": "string"}}

    def closed(properties: dict[str, Schema], *required: str) -> Schema:
        return {
            "type": "object",
            "properties": properties,
            "required": list(required or properties),
            "additionalProperties": False,
        }

    queued = closed({"id": message["id"], "message_id": message["message_id"]})
    # A fault of the whole body has no index.
    where: dict[str, Schema] = {
        "index": {"type": "integer", "minimum": 0},
        "field": {"type": "string"},
    }
    problem = closed({**where, "error": {"type": "string"}}, "field", "error")
    return {
        "Message": closed(message),
        "Error": closed(error),
        "BadRequest": closed({**error, "errors": errors}, "error"),
        "BadFields": closed({**error, "errors": errors}),
        "KeyReused": closed({**error, "id": {"type": "integer"}}),
        "MoveRefused": closed({**error, "status": message["status"]}),
        "Batch": closed({"messages": {"type": "array", "items": queued}}),
        "BatchRefused": closed({**error, "errors": {"type": "array", "items": problem}}, "error"),
        "Attachment": {
            "type": "object",
            "required": ["filename", "content"],
            "properties": {
                "filename": {
                    "type": "string",
                    "minLength": 1,
                    "pattern": ONE_LINE,
                    "description": "Folders are dropped; at most 255 characters.",
                },
                "content_type": {
                    "type": ["string", "null"],
                    "pattern": r"^[\w.+-]{1,127}/[\w.+-]{1,127}(;.*)?$",
                    "description": "Guessed from the file name when missing.",
                },
                # byte: OpenAPI 3.0's name for base64, which tools still read.
                "content": {"type": "string", "format": "byte", "contentEncoding": "base64"},
            },
        },
    }


def _headers() -> dict[str, Schema]:
    def header(description: str, **schema: Any) -> Schema:
        return {
            "description": description,
            "required": True,
            "schema": {"type": "string", **schema},
        }

    return {
        "Location": header("The message's URL."),
        "Idempotent-Replayed": {
            **header("A repeat of an earlier request.", const="true"),
            "required": False,
        },
        "WWW-Authenticate": header("How to authenticate.", const="Bearer"),
        "Retry-After": header("Seconds to wait.", pattern="^[0-9]+$"),
    }


def _version() -> str:
    try:
        return version("outbox")
    except PackageNotFoundError:
        return "0"


def document() -> dict[str, Any]:
    """The whole OpenAPI document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "outbox",
            "version": _version(),
            "description": "Queue mail over HTTP; workers send it over SMTP.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/messages": {"post": _create()},
            "/api/messages/batch": {"post": _create_batch()},
            "/api/messages/{id}": {
                "get": {
                    "summary": "A message and how its delivery is going",
                    "parameters": [MESSAGE_ID],
                    "responses": {
                        "200": _answer("The message.", "Message"),
                        "401": UNAUTHORIZED,
                        "404": NOT_FOUND,
                        "503": UNAVAILABLE,
                    },
                }
            },
            "/api/messages/{id}/resend": {
                "post": _move("Queue a failed or cancelled message again")
            },
            "/api/messages/{id}/cancel": {"post": _move("Cancel a queued or deferred message")},
            "/api/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "401": UNAUTHORIZED,
                        "503": UNAVAILABLE,
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from `outbox create-token`.",
                }
            },
            "schemas": _schemas(),
            "headers": _headers(),
        },
    }
