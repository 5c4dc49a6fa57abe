"""The OpenAPI operations that queue messages: one, as JSON, a form or multipart; a batch."""

from outbox.api.openapi.examples import EXAMPLES
from outbox.api.openapi.parts import (
    UNAUTHORIZED,
    UNAVAILABLE,
    UNSUPPORTED,
    Schema,
    answer,
    model_schema,
    ref,
)
from outbox.core.schema import FORM_KINDS, NewMessage
from outbox.queue.wire import BATCH_KEY, BATCH_LIMIT, IDEMPOTENCY_KEY

# A file part of multipart: format binary is what code generators read as a file.
FILE = {"type": "string", "format": "binary", "contentMediaType": "application/octet-stream"}


def _form_field(kind: str, shape: Schema) -> Schema:
    """What a form sends for a field of the JSON shape: text, repeated for a list."""
    noted = {k: shape[k] for k in ("title", "description") if k in shape}
    branches = [b for b in shape.get("anyOf", [shape]) if b.get("type") != "null"]
    if kind == "repeated":
        return {**next(b for b in branches if b.get("type") == "array"), **noted}
    (value,) = branches
    if value.get("type") == "integer":  # digits, a few enough that any match is in range
        digits = len(str(min(-value["minimum"], value["maximum"]))) - 1
        value = {"type": "string", "pattern": f"^[-+]?[0-9]{{1,{digits}}}$"}
    return {**value, **noted}


def _form(json_body: Schema, files: bool) -> Schema:
    """A form body: the fields a form carries, as it sends them; files only in multipart."""
    properties: dict[str, Schema] = {}
    for name, kind in FORM_KINDS.items():
        if kind != "files":
            properties[name] = _form_field(kind, json_body["properties"][name])
        elif files:
            properties[name] = {"type": "array", "items": FILE,
                                "description": "Files; one with a Content-ID header of its own "
                                "is an inline part of the HTML."}  # fmt: skip
    kept = {k: json_body[k] for k in ("type", "required", "additionalProperties", "description")}
    return {**kept, "properties": properties}


def schemas() -> dict[str, Schema]:
    """The bodies of a message sent as a form, urlencoded or multipart (with files), and
    of a batch."""
    json_body, _ = model_schema(NewMessage)
    messages = {
        "type": "array", "minItems": 1, "maxItems": BATCH_LIMIT, "items": ref("schemas/NewMessage"),
        "description": "Checked as POST /api/messages checks one message; attachments are "
        "stored as there.",
    }  # fmt: skip
    batch = {"type": "object", "required": ["messages"], "additionalProperties": False,
             "properties": {"messages": messages}}  # fmt: skip
    return {"NewMessageForm": _form(json_body, files=False),
            "NewMessageUpload": _form(json_body, files=True), "NewBatch": batch}  # fmt: skip


def _request_body() -> Schema:
    return {
        "required": True,
        "content": {
            "application/json": {"schema": ref("schemas/NewMessage")},
            "application/x-www-form-urlencoded": {"schema": ref("schemas/NewMessageForm")},
            "multipart/form-data": {"schema": ref("schemas/NewMessageUpload")},
        },
    }


def create() -> Schema:
    key = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
        "description": "Per token: a repeat answers the first message and queues nothing.",
    }
    created = answer(
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
            "400": answer("A malformed JSON body; a bad Idempotency-Key.", "BadRequest"),
            "401": UNAUTHORIZED,
            "409": answer("The Idempotency-Key was used for another message.", "KeyReused"),
            "413": answer("Over MAX_MESSAGE_BYTES, named in bytes.", "TooLarge"),
            "415": UNSUPPORTED,
            "422": answer("Bad or unknown fields, each named with what is wrong.", "BadFields"),
            "503": UNAVAILABLE,
        },
    }


def create_batch() -> Schema:
    key = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": BATCH_KEY.pattern},
        "description": "Per token, apart from the keys of single messages: a repeat of the "
        "batch answers the first one and queues nothing.",
    }
    created = answer(
        "All queued; ids in request order.",
        "Batch",
        **{"Idempotent-Replayed": "Idempotent-Replayed"},
    )
    too_large = answer(f"Over {BATCH_LIMIT} messages, or a message or the request over "
                       "MAX_MESSAGE_BYTES.", "BatchRefused")  # fmt: skip
    too_large["content"]["application/json"] = {
        "schema": {"anyOf": [ref("schemas/BatchRefused"), ref("schemas/TooLarge")]},
        "example": EXAMPLES["TooLarge"],
    }
    return {
        "summary": f"Queue 1 to {BATCH_LIMIT} messages: all of them, or none",
        "parameters": [key],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": ref("schemas/NewBatch")}}},
        "responses": {
            "201": created,
            "400": answer("Not a JSON object with a messages list; a bad Idempotency-Key.",
                          "BatchRefused"),
            "401": UNAUTHORIZED,
            "409": answer("The Idempotency-Key was used for another batch.", "KeyReused"),
            "413": too_large,
            "415": UNSUPPORTED,
            "422": answer("No messages, or bad ones (unknown fields too), each named by index "
                          "and field.", "BatchRefused"),
            "503": UNAVAILABLE,
        },
    }  # fmt: skip
