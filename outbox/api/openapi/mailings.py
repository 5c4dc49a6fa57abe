"""The OpenAPI operations of mailings: create, append, read, pause, resume, cancel."""

from typing import Any

from outbox.api.openapi.parts import (
    UNAUTHORIZED,
    UNAVAILABLE,
    UNSUPPORTED,
    Schema,
    answer,
    closed,
    model_schema,
    ref,
)
from outbox.capabilities.mailings.head import FIELDS, URL_CHARS
from outbox.capabilities.mailings.recipients import FIELDS_BYTES, MAX_RECIPIENTS
from outbox.core.schema import NewMessage

ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}
TEMPLATE = " A Jinja2 template (sandboxed) of the recipient's fields, email and name."


def schemas() -> dict[str, Schema]:
    message, _ = model_schema(NewMessage)
    shown = message["properties"]
    fields: dict[str, Any] = {name: dict(shown[name]) for name in FIELDS if name in shown}
    for name in ("subject", "text", "html"):
        fields[name]["description"] = fields[name].get("description", "") + TEMPLATE
    fields["unsubscribe_url"] = {
        "type": "string", "maxLength": URL_CHARS, "pattern": "^https://",
        "description": "The List-Unsubscribe URL, a template; default: OUTBOX_UNSUBSCRIBE_URL's "
        "one-click page. `unsubscribe_token` holds outbox's signed token.",
    }  # fmt: skip
    recipient = closed({
        "email": {"type": "string", "format": "email"},
        "name": {"type": "string", "maxLength": 998},
        "fields": {"type": "object", "description": f"At most {FIELDS_BYTES} bytes as JSON."},
    }, "email")  # fmt: skip
    recipients = {"type": "array", "items": ref("schemas/MailingRecipient"), "minItems": 1,
                  "maxItems": MAX_RECIPIENTS,
                  "description": "Anywhere in the object; sent last, they are stored as "
                                 "they stream, else kept until the fields are read."}  # fmt: skip
    new = {"type": "object", "properties": {**fields, "recipients": recipients},
           "required": ["recipients"], "additionalProperties": False,
           "description": "One body for many recipients, stored all or none."}  # fmt: skip
    count = {"type": "integer", "minimum": 0}
    statuses = ("queued", "sending", "sent", "deferred", "failed", "bounced", "cancelled")
    state = {"type": "string", "enum": ["open", "paused", "cancelled"]}
    mailing = closed({
        "id": {"type": "integer"}, "state": state, "from": {"type": "string"},
        "subject": {"type": "string"}, "recipients": count, "attachments": count,
        "priority": {"type": "integer"},
        "send_after": {"type": ["string", "null"], "format": "date-time"},
        "created_at": {"type": "string", "format": "date-time"},
        "progress": closed({name: count for name in statuses}),
    })  # fmt: skip
    moved = {**mailing, "properties": {**mailing["properties"], "moved": count}}
    return {
        "MailingRecipient": recipient,
        "NewMailing": new,
        "Mailing": mailing,
        "MailingMoved": moved,
        "MailingRefused": closed({"error": {"type": "string"}, "state": state}),
        "MailingCreated": closed({"id": {"type": "integer"}, "recipients": count, "state": state}),
        "RecipientsAdded": closed({"id": {"type": "integer"}, "added": count, "recipients": count}),
        "NewRecipients": closed({"recipients": recipients}, "recipients"),
    }


def _body(schema: str) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": ref(f"schemas/{schema}")}}}


MALFORMED = answer("Not JSON, or not an object.", "BatchRefused")
TOO_LARGE = answer("The request over MAX_MESSAGE_BYTES, named in bytes; nothing was stored.",
                   "TooLarge")  # fmt: skip
REFUSED = answer("Bad fields, templates or recipients, each named (index: the recipient's "
                 "place in the list); nothing was stored.", "BatchRefused")  # fmt: skip


def create() -> Schema:
    return {
        "summary": "Create a mailing with up to 100,000 recipients, read as a stream",
        "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                        "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"}}],
        "requestBody": _body("NewMailing"),
        "responses": {
            "201": answer("Stored whole: its id and how many recipients it holds.",
                          "MailingCreated"),
            "400": answer("Not JSON, or not an object; a bad Idempotency-Key.", "BatchRefused"),
            "401": UNAUTHORIZED, "413": TOO_LARGE, "415": UNSUPPORTED, "422": REFUSED,
            "503": UNAVAILABLE,
        },
    }  # fmt: skip


def append() -> Schema:
    return {
        "summary": "Add recipients to an open or paused mailing (paused ones wait), all or none",
        "parameters": [ID],
        "requestBody": _body("NewRecipients"),
        "responses": {
            "201": answer("How many were added, and the mailing's total.", "RecipientsAdded"),
            "400": MALFORMED, "401": UNAUTHORIZED, "404": answer("No such mailing.", "Error"),
            "409": answer("The mailing is cancelled.", "Error"), "413": TOO_LARGE,
            "415": UNSUPPORTED, "422": REFUSED, "503": UNAVAILABLE,
        },
    }  # fmt: skip


def show() -> Schema:
    return {
        "summary": "A mailing and its progress: recipients per status, bounced among the sent",
        "parameters": [ID],
        "responses": {"200": answer("The mailing.", "Mailing"), "401": UNAUTHORIZED,
                      "404": answer("No such mailing.", "Error"), "503": UNAVAILABLE},
    }  # fmt: skip


def move(summary: str) -> Schema:
    return {
        "post": {
            "summary": summary,
            "parameters": [ID],
            "responses": {"200": answer("The mailing, and how many rows moved.", "MailingMoved"),
                          "401": UNAUTHORIZED, "404": answer("No such mailing.", "Error"),
                          "409": answer("Not in a state for that, which is named.",
                                        "MailingRefused"),
                          "503": UNAVAILABLE},
        }
    }  # fmt: skip


def paths() -> dict[str, Schema]:
    return {
        "/api/mailings": {"post": create()},
        "/api/mailings/{id}": {"get": show()},
        "/api/mailings/{id}/recipients": {"post": append()},
        "/api/mailings/{id}/pause": move("Hold the waiting recipients; those being sent finish"),
        "/api/mailings/{id}/resume": move("Make the held recipients due again"),
        "/api/mailings/{id}/cancel": move("Cancel every waiting recipient"),
    }
