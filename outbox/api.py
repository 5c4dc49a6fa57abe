"""The HTTP API other web apps use: enqueue a message, read it, resend or cancel it."""

from typing import Any

from flask import Blueprint, Response, abort, current_app, g, jsonify, request, url_for
from flask.blueprints import BlueprintSetupState
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from werkzeug.exceptions import HTTPException

from . import openapi, queue, tokens
from .checks import Upload, check_upload
from .drafts import Draft, DraftError, build_draft
from .extensions import csrf, db
from .models import Message
from .schema import FORM_KINDS, WIRE_NAMES
from .wire import BATCH_KEY, BATCH_LIMIT, IDEMPOTENCY_KEY, message_json

bp = Blueprint("api", __name__, url_prefix="/api")
# What an API answer (JSON, never rendered) needs: not to be sniffed as a page, framed
# or allowed to load anything.
API_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
]
# The fields a form repeats for several values, and those multipart sends files in.
REPEATED = [name for name, kind in FORM_KINDS.items() if kind == "repeated"]
FILES = [name for name, kind in FORM_KINDS.items() if kind == "files"]


@bp.record_once
def exempt_from_csrf(state: BlueprintSetupState) -> None:
    """Clients send a token with each request, never a cookie: there is no CSRF to stop."""
    csrf.exempt(bp)


@bp.after_request
def api_headers(response: Response) -> Response:
    """The API's own headers, on every answer it gives."""
    for name, value in API_HEADERS:
        response.headers.setdefault(name, value)
    return response


def _error(code: int, message: str, **extra: Any) -> Response:
    response = jsonify(error=message, **extra)
    response.status_code = code
    return response


@bp.errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    response = _error(exc.code or 500, exc.description or exc.name)
    # Headers such as Allow (405) stay; the body is JSON whatever the exception would send.
    extra = [(k, v) for k, v in exc.get_headers() if k.lower() != "content-type"]
    response.headers.extend(extra)
    if exc.code == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


@bp.app_errorhandler(404)
@bp.app_errorhandler(405)
def unrouted(exc: HTTPException) -> Response | HTTPException:
    """A URL under /api/ that no route takes, or takes by another method, is answered in JSON.

    Routing fails before a blueprint is known, so the blueprint's own handler never sees
    these; pages keep Werkzeug's answer.
    """
    if request.path.startswith(f"{bp.url_prefix}/"):
        return api_headers(http_error(exc))
    return exc


@bp.errorhandler(OperationalError)
@bp.errorhandler(InterfaceError)
def database_down(exc: DBAPIError) -> Response:
    """The database cannot be reached; anything else from it is a bug and stays a 500.

    The request's session is ended by the app's teardown, which copes with a connection
    that went down too (create_app's _close_session).
    """
    current_app.logger.warning("database unavailable: %s", exc.orig)
    # A COMMIT whose reply was lost may have landed: only a retry with the same
    # Idempotency-Key is sure not to queue the message twice.
    response = _error(503, "the database is unavailable; retry later with the same Idempotency-Key")
    response.headers["Retry-After"] = "5"
    return response


@bp.before_request
def authenticate() -> Response | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    name = tokens.cache().name(token.strip()) if scheme.lower() == "bearer" and token else None
    if name is None:
        response = _error(401, "a valid API token is required (Authorization: Bearer TOKEN)")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response
    g.token_name = name
    return None


def _request_fields() -> dict[str, Any]:
    """The message fields of a JSON, form or multipart body, checked uploads included."""
    if request.is_json:
        try:
            body = request.get_json(silent=True)
        except RecursionError:  # nested deeper than the decoder goes: not a message either
            body = None
        if not isinstance(body, dict):
            raise DraftError({"body": "must be a JSON object"})
        return body
    if request.mimetype not in ("application/x-www-form-urlencoded", "multipart/form-data"):
        raise DraftError({"body": "send JSON, a form, or multipart/form-data"})
    form = request.form
    fields: dict[str, Any] = {k: form.get(k) for k in WIRE_NAMES.values() if k in form}
    for name in REPEATED:
        fields[name] = form.getlist(name)
    return fields


def _uploads() -> tuple[list[Upload], dict[str, str]]:
    """The checked files of a multipart body, and what is wrong with them."""
    uploads: list[Upload] = []
    errors: dict[str, str] = {}
    for name in FILES:
        for item in request.files.getlist(name):
            try:
                uploads.append(check_upload(item.filename or "", item.content_type, item.read()))
            except ValueError as exc:
                errors[name] = str(exc)
    return uploads, errors


def _draft(default_sender: str | None) -> Draft:
    """The request's message, with every bad field and upload named in one DraftError."""
    fields = _request_fields()
    # Only multipart bodies carry files; asking a JSON request for them parses it as a form.
    uploads, errors = _uploads() if request.mimetype == "multipart/form-data" else ([], {})
    try:
        draft = build_draft(fields, default_sender)
    except DraftError as exc:
        raise DraftError({**exc.errors, **errors}) from None
    if errors:
        raise DraftError(errors)
    draft.attachments.extend(uploads)
    return draft


@bp.post("/messages")
def create_message() -> Response:
    """Queue a message; 201 with its id, or the earlier one for a repeated Idempotency-Key."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        return _error(400, "Idempotency-Key must be 1 to 255 printable ASCII characters")
    config = current_app.config
    try:
        draft = _draft(config["MAIL_DEFAULT_SENDER"])
    except DraftError as exc:
        status = 400 if "body" in exc.errors else 422
        return _error(status, "the message was not queued", errors=exc.errors)
    if draft.size() > config["MAX_MESSAGE_BYTES"]:
        limit = config["MAX_MESSAGE_BYTES"]
        return _error(
            413, f"bodies and attachments come to {draft.size()} bytes; the limit is {limit}"
        )  # noqa: E501
    source = f"api:{g.token_name}"
    message, created = queue.enqueue(
        draft, source=source, max_attempts=config["MAX_ATTEMPTS"], idempotency_key=key
    )
    if not created and message.request_hash != draft.fingerprint():
        return _error(409, "this Idempotency-Key was used for a different message", id=message.id)
    response = jsonify(message_json(message))
    response.status_code = 201
    response.headers["Location"] = url_for("api.show_message", message_pk=message.id)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


class BatchRefused(Exception):
    """A batch that is stored not at all; errors name the index and field of each problem."""

    def __init__(self, status: int, message: str, errors: list[dict[str, Any]]):
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors


def _batch_items() -> list[Any]:
    """The messages list of a batch body, its length checked."""
    try:
        body = request.get_json(silent=True) if request.is_json else None
    except RecursionError:
        body = None
    items = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(items, list):
        problem = 'must be a JSON object {"messages": [message, ...]}'
        raise BatchRefused(400, "the batch was not queued", [{"field": "body", "error": problem}])
    if not 1 <= len(items) <= BATCH_LIMIT:
        problem = f"must hold 1 to {BATCH_LIMIT} messages; got {len(items)}"
        status = 413 if items else 422
        raise BatchRefused(status, f"messages {problem}", [{"field": "messages", "error": problem}])
    return items


def _batch_drafts(items: list[Any], default_sender: str | None, limit: int) -> list[Draft]:
    """Every message checked as POST /api/messages checks one; BatchRefused naming each fault."""
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
            problem = f"bodies and attachments come to {draft.size()} bytes; the limit is {limit}"
            errors.append({"index": index, "field": "size", "error": problem})
            too_big = True
        drafts.append(draft)
    if errors:
        raise BatchRefused(413 if too_big else 422, "no message of the batch was queued", errors)
    return drafts


@bp.post("/messages/batch")
def create_batch() -> Response:
    """Queue 1 to BATCH_LIMIT messages, all or none; 201 with their ids in request order."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not BATCH_KEY.match(key):
        return _error(400, "Idempotency-Key of a batch must be 1 to 250 printable ASCII characters")
    config = current_app.config
    try:
        drafts = _batch_drafts(
            _batch_items(), config["MAIL_DEFAULT_SENDER"], config["MAX_MESSAGE_BYTES"]
        )
    except BatchRefused as exc:
        return _error(exc.status, exc.message, errors=exc.errors)
    queued, created = queue.enqueue_batch(
        drafts, source=f"api:{g.token_name}", max_attempts=config["MAX_ATTEMPTS"],
        idempotency_key=key,
    )  # fmt: skip
    if not created and queued[0].request_hash != queue.batch_fingerprint(drafts):
        return _error(409, "this Idempotency-Key was used for a different batch", id=queued[0].id)
    response = jsonify(messages=[{"id": q.id, "message_id": q.message_id} for q in queued])
    response.status_code = 201
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@bp.get("/openapi.json")
def describe() -> Response:
    """The OpenAPI 3.1 description of this API."""
    return jsonify(openapi.document())


def _find(message_pk: int) -> Message:
    # Ids are 64-bit: asked for a larger one, PostgreSQL and SQLite raise an error
    # instead of finding nothing.
    found = db.session.get(Message, message_pk) if message_pk < 2**63 else None
    if found is None:
        abort(404, description=f"no message {message_pk}")
    return found


@bp.get("/messages/<int:message_pk>")
def show_message(message_pk: int) -> Response:
    return jsonify(message_json(_find(message_pk)))


@bp.post("/messages/<int:message_pk>/resend")
def resend_message(message_pk: int) -> Response:
    """Queue a failed or cancelled message again; 409 from any other status."""
    _find(message_pk)
    try:
        queue.resend(message_pk, current_app.config["MAX_ATTEMPTS"])
    except queue.MoveRefused as exc:
        return _error(409, str(exc), status=_find(message_pk).status)
    db.session.expire_all()
    return jsonify(message_json(_find(message_pk)))


@bp.post("/messages/<int:message_pk>/cancel")
def cancel_message(message_pk: int) -> Response:
    """Cancel a queued or deferred message; 409 from any other status."""
    _find(message_pk)
    try:
        queue.cancel(message_pk)
    except queue.MoveRefused as exc:
        return _error(409, str(exc), status=_find(message_pk).status)
    db.session.expire_all()
    return jsonify(message_json(_find(message_pk)))
