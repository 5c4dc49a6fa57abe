"""The OpenAPI operations that read messages (a listing, one message) or move one."""

from outbox.api.openapi.parts import (
    MESSAGE_ID,
    NOT_FOUND,
    UNAUTHORIZED,
    UNAVAILABLE,
    Schema,
    answer,
)
from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.queue.wire import MAX_PAGE_LIMIT, PAGE_LIMIT


def _query(name: str, description: str, **schema: object) -> Schema:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema}  # fmt: skip


def listing() -> Schema:
    parameters = [
        _query("status", "Only messages in this status.", type="string",
               enum=[status.value for status in Status]),
        _query("stream", "Only messages of this stream.", type="string",
               enum=[stream.value for stream in Stream]),
        _query("recipient", "Only messages to this address (To, Cc or Bcc): the address as "
               "stored, the domain in any case.", type="string", format="email"),
        _query("source", "Only messages queued by this source (api:TOKEN-NAME, web:EMAIL).",
               type="string", maxLength=255),
        _query("since", "Only messages created at or after this time (ISO 8601, UTC if no "
               "zone).", type="string", format="date-time"),
        _query("until", "Only messages created before this time.", type="string",
               format="date-time"),
        _query("before", "Only messages with a lower id: the next page (use the next link).",
               type="integer", minimum=1, maximum=2**63 - 1),
        _query("limit", f"Messages in the page; default {PAGE_LIMIT}.", type="integer", minimum=1,
               maximum=MAX_PAGE_LIMIT),
    ]  # fmt: skip
    return {
        "summary": "Messages newest first, filtered, a page at a time",
        "description": "Keyset pages on id, newest first. Filtered by stream, recipient, source "
        "or time, a page looks at a window of ids and may hold fewer messages than the limit, "
        "or none, with a next link: follow next until it is null.",
        "parameters": parameters,
        "responses": {
            "200": answer("A page of messages and the URL of the next one.", "MessagePage"),
            "401": UNAUTHORIZED,
            "422": answer("Bad or unknown parameters, each named.", "BadFields"),
            "503": UNAVAILABLE,
        },
    }


def show() -> Schema:
    return {
        "summary": "A message, its attachments (not their content), its attempts",
        "parameters": [MESSAGE_ID],
        "responses": {
            "200": answer("The message.", "MessageDetail"),
            "401": UNAUTHORIZED,
            "404": NOT_FOUND,
            "503": UNAVAILABLE,
        },
    }


def move(summary: str) -> Schema:
    return {
        "summary": summary,
        "parameters": [MESSAGE_ID],
        "responses": {
            "200": answer("The message after the move.", "Moved"),
            "401": UNAUTHORIZED,
            "404": NOT_FOUND,
            "409": answer("Not allowed from the message's status.", "MoveRefused"),
            "503": UNAVAILABLE,
        },
    }
