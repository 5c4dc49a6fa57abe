"""Mailings over the API: create one with its recipients, append, read, pause,
resume, cancel."""

from typing import Any

from flask import Response, current_app, g, jsonify, request, url_for

from outbox.api.blueprint import Refused, answer_error, bp
from outbox.api.bodies import JSON, check_content_type
from outbox.auth import audit
from outbox.capabilities.mailings import control, intake, reads
from outbox.core.streams import Stream
from outbox.models import ID_RANGE, Mailing
from outbox.models.db import db
from outbox.ops import metrics
from outbox.queue.wire import IDEMPOTENCY_KEY, iso


@bp.errorhandler(intake.Refusal)
def refusal(exc: intake.Refusal) -> Response:
    extra: dict[str, Any] = {"errors": exc.errors} if exc.errors else {}
    return answer_error(exc.code, exc.error, **extra, **exc.extra)


@bp.errorhandler(intake.Malformed)
def malformed(exc: intake.Malformed) -> Response:
    return answer_error(400, str(exc), errors=[{"field": "body", "error": str(exc)}])


def mailing_json(mailing: Mailing, counts: dict[str, int] | None = None) -> dict[str, Any]:
    """What the API tells about a mailing: its fields, state and progress per status."""
    if counts is None:
        counts = control.progress([mailing.id])[mailing.id]
    return {
        "id": mailing.id,
        "state": mailing.state,
        "from": mailing.from_addr,
        "subject": mailing.subject,
        "recipients": mailing.recipient_count,
        "attachments": mailing.attachment_count,
        "priority": mailing.priority,
        "send_after": iso(mailing.send_after),
        "created_at": iso(mailing.created_at),
        "progress": counts,
    }


def _id(mailing_id: int) -> int:
    """The id, or a 404 where no id can be (ID_RANGE)."""
    if mailing_id not in ID_RANGE:
        raise Refused(404, f"no mailing {mailing_id}")
    return mailing_id


def _find(mailing_id: int) -> Mailing:
    found = reads.find(_id(mailing_id))
    if found is None:
        raise Refused(404, f"no mailing {mailing_id}")
    return found


@bp.post("/mailings")
def create_mailing() -> Response:
    """Store a mailing with up to 100,000 recipients, read as the body streams; 201 with its
    id and how many recipients it holds, or the earlier one for a repeated Idempotency-Key."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        return answer_error(400, "Idempotency-Key must be 1 to 255 printable ASCII characters")
    check_content_type((JSON,))
    config = current_app.config
    mailing, created = intake.create(
        request.stream, source=f"api:{g.token_name}", max_attempts=config["MAX_ATTEMPTS"],
        default_sender=config["MAIL_DEFAULT_SENDER"], key=key,
    )  # fmt: skip
    response = jsonify(id=mailing.id, recipients=mailing.recipient_count, state=mailing.state)
    response.status_code = 201
    response.headers["Location"] = url_for("api.show_mailing", mailing_id=mailing.id)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    else:
        count = mailing.recipient_count  # each recipient is a message
        metrics.count_enqueued("api", count, {Stream.BROADCAST.value: count})
        detail = {"mailing": mailing.id, "recipients": mailing.recipient_count}
        audit.record("mailing", None, detail)
    return response


@bp.post("/mailings/<int:mailing_id>/recipients")
def append_recipients(mailing_id: int) -> Response:
    """Add a page of recipients {"recipients": [...]} to an open or paused mailing."""
    check_content_type((JSON,))
    max_attempts = current_app.config["MAX_ATTEMPTS"]
    mailing, added = intake.append(_id(mailing_id), request.stream, max_attempts=max_attempts)
    metrics.count_enqueued("api", added, {Stream.BROADCAST.value: added})
    response = jsonify(id=mailing.id, added=added, recipients=mailing.recipient_count)
    response.status_code = 201
    return response


@bp.get("/mailings/<int:mailing_id>")
def show_mailing(mailing_id: int) -> Response:
    """The mailing and its progress: its recipients per status, bounced among the sent."""
    return jsonify(mailing_json(_find(mailing_id)))


def _moved(mailing_id: int, action: str, moved: int) -> Response:
    audit.record(f"mailing_{action}", None, {"mailing": mailing_id, "moved": moved})
    db.session.expire_all()
    return jsonify({**mailing_json(_find(mailing_id)), "moved": moved})


@bp.post("/mailings/<int:mailing_id>/pause")
def pause_mailing(mailing_id: int) -> Response:
    """Hold the mailing's waiting recipients; those being sent finish. 409 if cancelled."""
    return _moved(mailing_id, "pause", control.pause(_id(mailing_id)))


@bp.post("/mailings/<int:mailing_id>/resume")
def resume_mailing(mailing_id: int) -> Response:
    """Make the held recipients due again. 409 if cancelled."""
    return _moved(mailing_id, "resume", control.resume(_id(mailing_id)))


@bp.post("/mailings/<int:mailing_id>/cancel")
def cancel_mailing(mailing_id: int) -> Response:
    """Cancel every waiting recipient of the mailing; those being sent finish."""
    return _moved(mailing_id, "cancel", control.cancel(_id(mailing_id)))
