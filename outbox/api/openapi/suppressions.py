"""The OpenAPI operations of the suppression list: list it, add an address, take one off."""

from outbox.api.openapi.parts import UNAUTHORIZED, UNAVAILABLE, Schema, answer, closed
from outbox.capabilities import suppression

MAX_LIMIT = 500  # as outbox.api.suppressions takes it


def schemas() -> dict[str, Schema]:
    text = {"type": "string"}
    maybe_text = {"type": ["string", "null"]}
    maybe_time = {"type": ["string", "null"], "format": "date-time"}
    maybe_id = {"type": ["integer", "null"]}
    entry = closed(
        {
            "id": {"type": "integer"},
            "address": text,
            "key": {
                **text,
                "description": "What addresses are matched by: the local part "
                "exact, the domain as lower-case IDNA A-labels.",
            },
            "reason": text,
            "source": {"type": "string", "enum": list(suppression.SOURCES)},
            "created_at": {"type": "string", "format": "date-time"},
            "expires_at": {**maybe_time, "description": "null: for good"},
            "created_by": text,
            "message_pk": {
                **maybe_id,
                "description": "The message whose refusal was the evidence.",
            },
            "bounce_pk": {**maybe_id, "description": "The bounce mail that was the evidence."},
            "live": {"type": "boolean", "description": "false once expires_at has passed"},
        }
    )
    new = {
        "type": "object",
        "properties": {
            "address": {**text, "format": "email"},
            "reason": {**text, "minLength": 1, "maxLength": 1000},
            "expires_at": {
                **maybe_text,
                "format": "date-time",
                "description": "When the entry stops suppressing; null or absent: for good.",
            },
        },
        "required": ["address", "reason"],
        "additionalProperties": False,
    }
    page = closed(
        {
            "suppressions": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/Suppression"},
            },
            "next": {"type": ["string", "null"], "description": "The next page's URL."},
        }
    )
    return {"Suppression": entry, "NewSuppression": new, "SuppressionPage": page}


def listing() -> Schema:
    def query(name: str, description: str, **schema: object) -> Schema:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "description": description,
            "schema": schema,
        }

    return {
        "summary": "The suppression list newest first, a page at a time",
        "parameters": [
            query("q", "Only entries whose address holds this text, in any case.", type="string"),
            query(
                "before",
                "Only entries with a lower id: the next page (use the next link).",
                type="integer",
                minimum=1,
                maximum=2**63 - 1,
            ),
            query(
                "limit",
                f"Entries in the page, 1 to {MAX_LIMIT}; default 50.",
                type="integer",
                minimum=1,
                maximum=MAX_LIMIT,
            ),
        ],
        "responses": {
            "200": answer("A page of entries and the URL of the next one.", "SuppressionPage"),
            "401": UNAUTHORIZED,
            "422": answer("A bad parameter.", "BadFields"),
            "503": UNAVAILABLE,
        },
    }


def create() -> Schema:
    return {
        "summary": "Suppress an address: no message is sent to it while the entry is live",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/NewSuppression"}}
            },
        },
        "responses": {
            "200": answer(
                "The address was on the list already: its entry, unchanged.", "Suppression"
            ),
            "201": answer("The new entry.", "Suppression"),
            "400": answer("The body is not a JSON object.", "Error"),
            "401": UNAUTHORIZED,
            "422": answer("A bad address, reason or expiry, named.", "BadFields"),
            "503": UNAVAILABLE,
        },
    }


def remove() -> Schema:
    return {
        "summary": "Take an address off the suppression list",
        "parameters": [
            {
                "name": "address",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "format": "email"},
            }
        ],
        "responses": {
            "204": {"description": "Removed: the next message to it is sent."},
            "401": UNAUTHORIZED,
            "404": answer("The address was not on the list.", "Error"),
            "422": answer("Not an address.", "BadFields"),
            "503": UNAVAILABLE,
        },
    }
