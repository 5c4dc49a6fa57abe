"""The OpenAPI operations and schemas of webhook endpoints (outbox/api/webhooks.py)."""

from outbox.api.openapi.parts import UNAUTHORIZED, UNAVAILABLE, Schema, answer, closed, ref
from outbox.capabilities.webhooks.events import KINDS, TEST
from outbox.core.streams import Stream
from outbox.core.webhook_status import WebhookStatus

FORBIDDEN = answer("The token lacks the manage scope.", "Forbidden")


def schemas() -> dict[str, Schema]:
    kinds: Schema = {"type": "array", "items": {"type": "string", "enum": list(KINDS)}}
    time: Schema = {"type": ["string", "null"], "format": "date-time"}
    shown: dict[str, Schema] = {
        "id": {"type": "integer"},
        "url": {"type": "string"},
        "events": kinds,
        "enabled": {"type": "boolean"},
        "disabled_at": time,
        "disabled_reason": {"type": ["string", "null"]},
        "created_at": {"type": "string", "format": "date-time"},
        "created_by": {"type": "string"},
    }
    listed: Schema = {"type": "array", "items": ref("schemas/WebhookEndpoint")}
    maybe_int: Schema = {"type": ["integer", "null"]}
    maybe_text: Schema = {"type": ["string", "null"]}
    delivery: dict[str, Schema] = {
        "id": {"type": "integer"},
        "event_id": {"type": "string", "description": "The webhook-id header."},
        "type": {"type": "string"},
        "status": {"type": "string", "enum": [s.value for s in WebhookStatus]},
        "attempts": {"type": "integer"},
        "next_attempt_at": {"type": "string", "format": "date-time"},
        "last_attempt_at": time,
        "response_code": maybe_int,
        "latency_ms": maybe_int,
        "response": maybe_text,
        "error": maybe_text,
        "created_at": {"type": "string", "format": "date-time"},
        "payload": {"type": "object", "description": "The body as sent and signed."},
    }
    secret: Schema = {"type": "string", "pattern": "^whsec_", "description": "Shown this once."}
    return {
        "WebhookEndpoint": closed(shown),
        "NewWebhookEndpoint": closed(
            {
                "url": {
                    "type": "string",
                    "description": "http or https; its host must resolve to public addresses",
                },
                "events": {
                    **kinds,
                    "uniqueItems": True,
                    "description": "The kinds it takes; all when left out or empty.",
                },
            },
            "url",
        ),  # fmt: skip
        "WebhookEndpointMade": closed({**shown, "secret": secret}),
        "WebhookEndpoints": closed({"webhooks": listed}),
        "WebhookDelivery": closed(delivery),
        "WebhookEvent": event(),
        "WebhookDeliveryPage": closed(
            {
                "deliveries": {"type": "array", "items": ref("schemas/WebhookDelivery")},
                "next": {"type": ["string", "null"], "description": "The URL of the next page."},
            }
        ),  # fmt: skip
    }


def event() -> Schema:
    """The body of every webhook request (webhooks.events.Event), whatever its kind."""
    maybe_text: Schema = {"type": ["string", "null"]}
    data: dict[str, Schema] = {
        "id": {"type": ["integer", "null"], "description": "The message's; null in webhook.test."},
        "message_id": {**maybe_text, "description": "Its Message-ID; null in webhook.test."},
        "recipient": {**maybe_text, "description": "The address, in the recipient events."},
        "code": {"type": ["integer", "null"], "description": "The SMTP reply code; 250: sent."},
        "dsn": {**maybe_text, "description": "A bounce's DSN status, 5.1.1."},
        "text": maybe_text,
        "at": {"type": ["string", "null"], "format": "date-time"},
        "stream": {
            "type": ["string", "null"],
            "enum": [*(stream.value for stream in Stream), None],
            "description": "The message's stream; null in webhook.test.",
        },
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
    }
    return closed(
        {
            "type": {"type": "string", "enum": [*KINDS, TEST]},
            "timestamp": {"type": "string", "format": "date-time"},
            "data": closed(data),
        }
    )


def collection() -> Schema:
    """GET and POST /api/webhooks."""
    return {
        "get": {
            "summary": "The webhook endpoints, oldest first (manage scope)",
            "responses": {
                "200": answer("The endpoints, without their secrets.", "WebhookEndpoints"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "503": UNAVAILABLE,
            },
        },
        "post": {
            "summary": "Register a webhook endpoint; the answer holds its signing secret, once",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("schemas/NewWebhookEndpoint")}},
            },
            "responses": {
                "201": answer(
                    "The endpoint and its secret.", "WebhookEndpointMade", Location="Location"
                ),  # fmt: skip
                "400": answer("The body is not a JSON object.", "Error"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": answer("A bad or refused URL, an unknown kind or field.", "BadFields"),
                "503": UNAVAILABLE,
            },
        },
    }


def _endpoint_id() -> Schema:
    return {"name": "id", "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 0}}  # fmt: skip


def switch(summary: str) -> Schema:
    """POST /api/webhooks/{id}/enable or /disable."""
    return {
        "post": {
            "summary": summary,
            "parameters": [_endpoint_id()],
            "responses": {
                "200": answer("The endpoint after the change.", "WebhookEndpoint"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": answer("No such endpoint.", "Error"),
                "503": UNAVAILABLE,
            },
        }
    }


def deliveries() -> Schema:
    """GET /api/webhooks/{id}/deliveries."""
    before = {"name": "before", "in": "query", "required": False,
              "description": "Only deliveries with a lower id: the next page (the next link).",
              "schema": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}}  # fmt: skip
    return {
        "get": {
            "summary": "An endpoint's deliveries newest first, 50 a page (manage scope)",
            "parameters": [_endpoint_id(), before],
            "responses": {
                "200": answer(
                    "A page of deliveries and the URL of the next.", "WebhookDeliveryPage"
                ),  # fmt: skip
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": answer("No such endpoint.", "Error"),
                "422": answer("A bad or unknown parameter.", "BadFields"),
                "503": UNAVAILABLE,
            },
        }
    }


def one() -> Schema:
    """GET and DELETE /api/webhooks/{id}."""
    endpoint_id = {"name": "id", "in": "path", "required": True,
                   "schema": {"type": "integer", "minimum": 0}}  # fmt: skip
    return {
        "get": {
            "summary": "A webhook endpoint, without its secret (manage scope)",
            "parameters": [endpoint_id],
            "responses": {
                "200": answer("The endpoint.", "WebhookEndpoint"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": answer("No such endpoint.", "Error"),
                "503": UNAVAILABLE,
            },
        },
        "delete": {
            "summary": "Remove a webhook endpoint and its deliveries",
            "parameters": [endpoint_id],
            "responses": {
                "204": {"description": "Removed."},
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": answer("No such endpoint.", "Error"),
                "503": UNAVAILABLE,
            },
        },
    }
