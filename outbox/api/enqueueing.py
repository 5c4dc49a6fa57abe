"""Queuing over the API: one message, or a batch of them stored all or none."""

import collections
from typing import Any

from flask import Response, current_app, g, jsonify, request, url_for

from outbox import queue
from outbox.api.blueprint import Refused, answer_error, bp, too_large
from outbox.api.bodies import batch_items, read_draft
from outbox.core.drafts import Draft, DraftError, build_draft
from outbox.ops import metrics
from outbox.queue.wire import BATCH_KEY, IDEMPOTENCY_KEY, message_json


@bp.post("/messages")
def create_message() -> Response:
    """Queue a message; 201 with its id, or the earlier one for a repeated Idempotency-Key."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        return answer_error(400, "Idempotency-Key must be 1 to 255 printable ASCII characters")
    config = current_app.config
    try:
        draft = read_draft(config["MAIL_DEFAULT_SENDER"])
    except DraftError as exc:
        status = 400 if "body" in exc.errors else 422
        return answer_error(status, "the message was not queued", errors=exc.errors)
    if draft.size() > config["MAX_MESSAGE_BYTES"]:
        raise too_large(config["MAX_MESSAGE_BYTES"], draft.size())
    message, created = queue.enqueue(
        draft, source=f"api:{g.token_name}", max_attempts=config["MAX_ATTEMPTS"],
        idempotency_key=key,
    )  # fmt: skip
    if created:
        metrics.count_enqueued("api", streams={draft.stream.value: 1})
    if not created and message.request_hash != draft.fingerprint():
        error = "this Idempotency-Key was used for a different message"
        return answer_error(409, error, id=message.id)
    response = jsonify(message_json(message))
    response.status_code = 201
    response.headers["Location"] = url_for("api.show_message", message_pk=message.id)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


def _batch_drafts(items: list[Any], default_sender: str | None, limit: int) -> list[Draft]:
    """Every message checked as POST /api/messages checks one; Refused naming each fault."""
    drafts: list[Draft] = []
    errors: list[dict[str, Any]] = []
    too_big = False
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            errors.append({"index": index, "field": "message", "error": "must be a JSON object"})
            continue
        try:
            draft = build_draft(item, default_sender)
        except DraftError as exc:
            errors.extend({"index": index, "field": k, "error": v} for k, v in exc.errors.items())
            continue
        if draft.size() > limit:
            problem = too_large(limit, draft.size()).error
            errors.append({"index": index, "field": "size", "error": problem})
            too_big = True
        drafts.append(draft)
    if errors:
        raise Refused(413 if too_big else 422, "no message of the batch was queued", errors=errors)
    return drafts


@bp.post("/messages/batch")
def create_batch() -> Response:
    """Queue 1 to BATCH_LIMIT messages, all or none; 201 with their ids in request order."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not BATCH_KEY.match(key):
        return answer_error(
            400, "Idempotency-Key of a batch must be 1 to 250 printable ASCII characters"
        )
    config = current_app.config
    drafts = _batch_drafts(
        batch_items(), config["MAIL_DEFAULT_SENDER"], config["MAX_MESSAGE_BYTES"]
    )
    queued, created = queue.enqueue_batch(
        drafts, source=f"api:{g.token_name}", max_attempts=config["MAX_ATTEMPTS"],
        idempotency_key=key,
    )  # fmt: skip
    if created:
        streams = collections.Counter(draft.stream.value for draft in drafts)
        metrics.count_enqueued("api", len(queued), streams)
    if not created and queued[0].request_hash != queue.batch_fingerprint(drafts):
        error = "this Idempotency-Key was used for a different batch"
        return answer_error(409, error, id=queued[0].id)
    response = jsonify(messages=[{"id": q.id, "message_id": q.message_id} for q in queued])
    response.status_code = 201
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response
