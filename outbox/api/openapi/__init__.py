"""The OpenAPI 3.1 description of the HTTP API in outbox/api, served at /api/openapi.json."""

import functools
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from outbox.api.openapi import domains, mailings, queuing, suppressions, webhooks
from outbox.api.openapi.examples import DOCUMENT, exemplify
from outbox.api.openapi.parts import (
    UNAUTHORIZED,
    UNAVAILABLE,
    Schema,
    closed,
    forbid,
    header_schemas,
    model_schema,
    open_objects,
    ref,
)
from outbox.api.openapi.queuing import create, create_batch
from outbox.api.openapi.reading import listing, move, show
from outbox.core.roles import SCOPES
from outbox.core.schema import NewMessage
from outbox.queue.wire import Message, MessageDetail, Moved


def _schemas() -> dict[str, Schema]:
    new_message, new_refs = model_schema(NewMessage)
    found = {**new_refs, "NewMessage": new_message}
    for model in (Message, MessageDetail, Moved):
        schema, refs = model_schema(model, "serialization")
        found.update({**refs, model.__name__: schema})
    shown = found["Message"]["properties"]
    error = {"error": {"type": "string"}}
    errors = {"type": "object", "additionalProperties": {"type": "string"}}
    queued = closed({"id": shown["id"], "message_id": shown["message_id"]})
    # A fault of the whole body has no index.
    problem = closed({"index": {"type": "integer", "minimum": 0}, "field": {"type": "string"},
                      "error": {"type": "string"}}, "field", "error")  # fmt: skip
    text = {"type": "string"}
    next_page = {"type": ["string", "null"], "description": "The URL of the next page."}
    return {
        **found,
        **queuing.schemas(),
        "MessagePage": closed(
            {"messages": {"type": "array", "items": ref("schemas/Message")}, "next": next_page}
        ),  # fmt: skip
        "Error": closed(error),
        "Forbidden": closed({**error, "scope": {"type": "string", "enum": list(SCOPES)}}),
        "BadRequest": closed({**error, "errors": errors}, "error"),
        "BadFields": closed({**error, "errors": errors}),
        "TooLarge": closed({**error, "limit": {"type": "integer", "description": "bytes"}}),
        "Unsupported": closed({**error, "accepted": {"type": "array", "items": text}}),
        "KeyReused": closed({**error, "id": {"type": "integer"}}),
        "MoveRefused": closed({**error, "status": shown["status"]}),
        "Batch": closed({"messages": {"type": "array", "items": queued}}),
        "BatchRefused": closed({**error, "errors": {"type": "array", "items": problem}}, "error"),
        **suppressions.schemas(),
        **webhooks.schemas(),
        **mailings.schemas(),
        **domains.schemas(),
    }


def _version() -> str:
    try:
        return version("outbox")
    except PackageNotFoundError:
        return "0"


DOCUMENT_ITSELF = {
    "summary": "This document",
    "responses": {
        "200": {
            "description": "OpenAPI 3.1",
            "content": {"application/json": {"schema": {"type": "object"}, "example": DOCUMENT}},
        },
        "401": UNAUTHORIZED,
        "503": UNAVAILABLE,
    },
}


def _paths() -> dict[str, Schema]:
    """Every operation, by path and method."""
    return {
        "/api/messages": {"get": listing(), "post": create()},
        "/api/messages/batch": {"post": create_batch()},
        "/api/messages/{id}": {"get": show()},
        "/api/messages/{id}/resend": {
            "post": move(
                "Queue a failed or cancelled message again; one cancelled "
                "before its send_after waits for it"
            )  # fmt: skip
        },
        "/api/messages/{id}/cancel": {"post": move("Cancel a queued or deferred message")},
        "/api/openapi.json": {"get": DOCUMENT_ITSELF},
        "/api/suppressions": {"get": suppressions.listing(), "post": suppressions.create()},
        "/api/suppressions/{address}": {"delete": suppressions.remove()},
        "/api/webhooks": webhooks.collection(),
        "/api/webhooks/{id}": webhooks.one(),
        "/api/webhooks/{id}/enable": webhooks.switch("Enable a webhook endpoint"),
        "/api/webhooks/{id}/disable": webhooks.switch("Disable a webhook endpoint"),
        "/api/webhooks/{id}/deliveries": webhooks.deliveries(),
        **mailings.paths(),
        **domains.paths(),
    }


@functools.cache
def document() -> dict[str, Any]:
    """The whole OpenAPI document, made once, each body with an example."""
    paths = _paths()
    forbid(paths)
    exemplify(paths)
    found = {
        "openapi": "3.1.0",
        "info": {
            "title": "outbox",
            "version": _version(),
            "description": "Queue mail over HTTP; workers send it over SMTP.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from `outbox create-token`.",
                }
            },
            "schemas": _schemas(),
            "headers": header_schemas(),
        },
    }
    open_objects(found)
    return found
