"""The OpenAPI 3.1 description of the HTTP API in api.py, served at /api/openapi.json."""

import functools
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from .schema import FORM_KINDS, NewMessage
from .wire import BATCH_KEY, BATCH_LIMIT, IDEMPOTENCY_KEY, Message

Schema = dict[str, Any]
COMPONENTS = "#/components/schemas/{model}"
FILE = {"type": "string", "contentMediaType": "application/octet-stream"}  # in multipart


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/{name}"}


def _model(model: type[BaseModel], mode: JsonSchemaMode = "validation") -> tuple[Schema, Schema]:
    """A model's JSON Schema, and the schemas it refers to (in components)."""
    schema = model.model_json_schema(ref_template=COMPONENTS, mode=mode)
    return schema, schema.pop("$defs", {})


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
            properties[name] = {"type": "array", "items": FILE}
    required = {k: json_body[k] for k in ("type", "required", "anyOf")}
    return {**required, "properties": properties}


def _request_body() -> Schema:
    json_body, _ = _model(NewMessage)
    return {
        "required": True,
        "content": {
            "application/json": {"schema": _ref("schemas/NewMessage")},
            "application/x-www-form-urlencoded": {"schema": _form(json_body, files=False)},
            "multipart/form-data": {"schema": _form(json_body, files=True)},
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
        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
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
        "schema": {"type": "string", "pattern": BATCH_KEY.pattern},
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
                "items": _ref("schemas/NewMessage"),
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
    new_message, new_refs = _model(NewMessage)
    message, message_refs = _model(Message, "serialization")
    shown = message["properties"]
    error = {"error": {"type": "string"}}
    errors = {"type": "object", "additionalProperties": {"type": "string"}}

    def closed(properties: dict[str, Schema], *required: str) -> Schema:
        return {
            "type": "object",
            "properties": properties,
            "required": list(required or properties),
            "additionalProperties": False,
        }

    queued = closed({"id": shown["id"], "message_id": shown["message_id"]})
    # A fault of the whole body has no index.
    problem = closed({"index": {"type": "integer", "minimum": 0}, "field": {"type": "string"},
                      "error": {"type": "string"}}, "field", "error")  # fmt: skip
    return {
        **new_refs,
        **message_refs,
        "NewMessage": new_message,
        "Message": message,
        "Error": closed(error),
        "BadRequest": closed({**error, "errors": errors}, "error"),
        "BadFields": closed({**error, "errors": errors}),
        "KeyReused": closed({**error, "id": {"type": "integer"}}),
        "MoveRefused": closed({**error, "status": shown["status"]}),
        "Batch": closed({"messages": {"type": "array", "items": queued}}),
        "BatchRefused": closed({**error, "errors": {"type": "array", "items": problem}}, "error"),
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


@functools.cache
def document() -> dict[str, Any]:
    """The whole OpenAPI document, made once."""
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
