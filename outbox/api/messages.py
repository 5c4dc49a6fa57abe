"""One message over the API: read it, resend it, cancel it."""

from flask import Response, abort, current_app, jsonify
from sqlalchemy import select

from outbox import queue
from outbox.api.blueprint import answer_error, bp
from outbox.auth import audit
from outbox.models import Attachment, Attempt, Message, utcnow
from outbox.models.db import db
from outbox.queue.wire import detail_json, iso, message_json


def _find(message_pk: int) -> Message:
    # Ids are 64-bit: asked for a larger one, PostgreSQL and SQLite raise an error
    # instead of finding nothing.
    found = db.session.get(Message, message_pk) if message_pk < 2**63 else None
    if found is None:
        abort(404, description=f"no message {message_pk}")
    return found


@bp.get("/messages/<int:message_pk>")
def show_message(message_pk: int) -> Response:
    """The message with its attachments (not their content) and its attempts."""
    message = _find(message_pk)
    attachments = select(Attachment).where(Attachment.message_pk == message_pk)
    attempts = select(Attempt).where(Attempt.message_pk == message_pk)
    return jsonify(detail_json(
        message,
        list(db.session.scalars(attachments.order_by(Attachment.id))),
        list(db.session.scalars(attempts.order_by(Attempt.id))),
    ))  # fmt: skip


def _moved(message_pk: int) -> Response:
    """The answer to a move: the message, noting when it waits for its send_after."""
    db.session.expire_all()
    message = _find(message_pk)
    found = message_json(message)
    waits = found["next_attempt_at"] and message.next_attempt_at > utcnow()
    found["note"] = f"waits for send_after {iso(message.send_after)}" if waits else None
    return jsonify(found)


@bp.post("/messages/<int:message_pk>/resend")
def resend_message(message_pk: int) -> Response:
    """Queue a failed or cancelled message again; 409 from any other status."""
    _find(message_pk)
    try:
        queue.resend(message_pk, current_app.config["MAX_ATTEMPTS"])
    except queue.MoveRefused as exc:
        return answer_error(409, str(exc), status=_find(message_pk).status)
    audit.record("resend", message_pk)
    return _moved(message_pk)


@bp.post("/messages/<int:message_pk>/cancel")
def cancel_message(message_pk: int) -> Response:
    """Cancel a queued or deferred message; 409 from any other status."""
    _find(message_pk)
    try:
        queue.cancel(message_pk)
    except queue.MoveRefused as exc:
        return answer_error(409, str(exc), status=_find(message_pk).status)
    audit.record("cancel", message_pk)
    return _moved(message_pk)
