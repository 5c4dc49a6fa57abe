"""Client: queue, read, resend and cancel messages over outbox's HTTP API."""

import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from outbox.client.email import Email, utc_text
from outbox.client.errors import Unavailable
from outbox.client.results import Message, MessageDetail, Page, Queued
from outbox.client.transport import Answer, Retries, Transport

# The API's batch limit (outbox.queue.wire.BATCH_LIMIT), kept here because outbox.queue.wire needs
# pydantic and the app's models, which a client does not have; send_many splits by it
# and an API with another limit names its own in the 413/422 it answers.
BATCH_LIMIT = 1000


def new_key() -> str:
    """An Idempotency-Key: random, so that only a retry of the same request repeats it."""
    return uuid.uuid4().hex


class Client:
    """outbox's API at url, used with a token; every send is retried under one key.

    retries: how many times a request is tried again after a 503 or a connection error,
    waiting backoff seconds, doubled each time up to max_backoff. A send keeps its
    Idempotency-Key through its retries, so the server queues it once however many
    answers were lost.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 10.0, retries: int = 4,
                 backoff: float = 0.5, max_backoff: float = 8.0):  # fmt: skip
        self.transport = Transport(url, token, timeout, Retries(retries, backoff, max_backoff))

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, *, idempotency_key: str | None = None, **fields: Any) -> Message:
        """Queue one message, given as Email's fields, and return it as stored.

        A repeat with the same idempotency_key returns the message the first queued;
        Conflict if the key was used for another message.
        """
        return self.send_email(Email(**fields), idempotency_key)

    def send_email(
        self, email: Email | Mapping[str, Any], idempotency_key: str | None = None
    ) -> Message:
        """Queue one Email, or a message already in the API's JSON shape."""
        answer = self._post("/api/messages", _json(email), idempotency_key)
        return Message.from_json(answer.body)

    def send_batch(self, messages: Iterable[Email | Mapping[str, Any]],
                   idempotency_key: str | None = None) -> list[Queued]:  # fmt: skip
        """Queue up to BATCH_LIMIT messages all or none; their ids in the order given.

        FieldErrors names each bad field with the index of its message; none is queued.
        """
        body = {"messages": [_json(m) for m in messages]}
        answer = self._post("/api/messages/batch", body, idempotency_key)
        return [Queued(q["id"], q["message_id"]) for q in answer.body["messages"]]

    def _post(self, path: str, body: dict[str, Any], key: str | None) -> Answer:
        """A send under its key; Unavailable tells the key, which a later send can repeat
        to learn whether the message was queued after all."""
        key = key or new_key()
        try:
            return self.transport.request("POST", path, body, {"Idempotency-Key": key})
        except Unavailable as exc:
            exc.idempotency_key = key
            raise

    def send_many(self, messages: Iterable[Email | Mapping[str, Any]]) -> list[Queued]:
        """Queue any number of messages, BATCH_LIMIT a request, each request all or none."""
        found: list[Queued] = []
        chunk: list[Email | Mapping[str, Any]] = []
        for message in messages:
            chunk.append(message)
            if len(chunk) == BATCH_LIMIT:
                found.extend(self.send_batch(chunk))
                chunk = []
        if chunk:
            found.extend(self.send_batch(chunk))
        return found

    def get(self, message_id: int) -> MessageDetail:
        """The message with its attachments' names and sizes and its attempts; NotFound if none."""
        return MessageDetail.from_json(
            self.transport.request("GET", f"/api/messages/{message_id}").body
        )

    def list(self, *, status: str | None = None, recipient: str | None = None,
             source: str | None = None, since: datetime | str | None = None,
             until: datetime | str | None = None, before: int | None = None,
             limit: int | None = None, stream: str | None = None) -> Page:  # fmt: skip
        """One page of messages newest first, filtered; page.before asks for the next."""
        asked = {"status": status, "stream": stream, "recipient": recipient, "source": source,
                 "since": utc_text(since), "until": utc_text(until), "before": before,
                 "limit": limit}  # fmt: skip
        query = urlencode({k: v for k, v in asked.items() if v is not None}, quote_via=quote)
        body = self.transport.request("GET", "/api/messages" + (f"?{query}" if query else "")).body
        following = parse_qs(urlsplit(body["next"]).query).get("before") if body["next"] else None
        return Page([Message.from_json(m) for m in body["messages"]],
                    int(following[0]) if following else None)  # fmt: skip

    def messages(self, **filters: Any) -> Iterator[Message]:
        """Every message the filters of list() match, newest first, a page at a time."""
        page = self.list(**filters)
        while True:
            yield from page.messages
            if page.before is None:
                return
            page = self.list(**{**filters, "before": page.before})

    def resend(self, message_id: int) -> Message:
        """Queue a failed or cancelled message again; Conflict from any other status."""
        return self._move(message_id, "resend")

    def cancel(self, message_id: int) -> Message:
        """Cancel a queued or deferred message; Conflict from any other status."""
        return self._move(message_id, "cancel")

    def _move(self, message_id: int, verb: str) -> Message:
        # A move carries no key: it is retried only when it cannot have been done
        # (a 503, a connection refused); a retry after a lost answer could meet the
        # message already moved and answer Conflict.
        path = f"/api/messages/{message_id}/{verb}"
        return Message.from_json(self.transport.request("POST", path, retry_lost=False).body)


def _json(message: Email | Mapping[str, Any]) -> dict[str, Any]:
    return message.to_json() if isinstance(message, Email) else dict(message)
