"""The API's blueprint: its headers, its token check and how it answers errors, in JSON."""

from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request
from flask.blueprints import BlueprintSetupState
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from werkzeug.exceptions import HTTPException

from outbox.api import openapi
from outbox.auth import tokens
from outbox.core.checks import oversize
from outbox.extensions import csrf

bp = Blueprint("api", __name__, url_prefix="/api")
# What an API answer (JSON, never rendered) needs: not to be sniffed as a page, framed
# or allowed to load anything.
API_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
]


class Refused(Exception):
    """A request the API answers with an error: its status, text, headers and more keys."""

    def __init__(self, code: int, error: str, headers: dict[str, str] | None = None, /,
                 **extra: Any):  # fmt: skip
        super().__init__(error)
        self.code, self.error, self.headers, self.extra = code, error, headers or {}, extra


def answer_error(code: int, error: str, /, **extra: Any) -> Response:
    """The API's error answer: an `error` text, and for bad fields `errors` naming each."""
    response = jsonify(error=error, **extra)
    response.status_code = code
    return response


def too_large(limit: int, size: int | None = None) -> Refused:
    """The 413 of a request or a message over MAX_MESSAGE_BYTES, naming the limit in bytes."""
    return Refused(413, oversize(limit, size), limit=limit)


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


@bp.errorhandler(Refused)
def refused(exc: Refused) -> Response:
    response = answer_error(exc.code, exc.error, **exc.extra)
    response.headers.extend(exc.headers)
    return response


@bp.errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    if exc.code == 413:  # Werkzeug's, past MAX_CONTENT_LENGTH: say the limit
        return refused(too_large(current_app.config["MAX_CONTENT_LENGTH"]))
    response = answer_error(exc.code or 500, exc.description or exc.name)
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
    error = "the database is unavailable; retry later with the same Idempotency-Key"
    response = answer_error(503, error)
    response.headers["Retry-After"] = "5"
    return response


# The scope each changing endpoint needs; every GET needs "read".
NEEDS = {
    "api.create_message": "send",
    "api.create_batch": "send",
    "api.resend_message": "manage",
    "api.cancel_message": "manage",
    "api.list_webhooks": "manage",  # webhooks: a URL may carry a receiver's key
    "api.show_webhook": "manage",
    "api.list_deliveries": "manage",
    "api.create_mailing": "send",
    "api.append_recipients": "send",
}


def needed_scope() -> str:
    """The token scope this request needs (outbox.roles.SCOPES)."""
    if request.method in ("GET", "HEAD", "OPTIONS") and request.endpoint not in NEEDS:
        return "read"
    return NEEDS.get(request.endpoint or "", "manage")


@bp.before_request
def authenticate() -> Response | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    found = tokens.cache().find(token.strip()) if scheme.lower() == "bearer" and token else None
    if found is None:
        response = answer_error(401, "a valid API token is required (Authorization: Bearer TOKEN)")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response
    g.token_name, scopes = found  # g.token_name also names the actor in outbox.audit
    scope = needed_scope()
    if scope not in scopes:
        return answer_error(403, f"this token lacks the {scope!r} scope", scope=scope)
    return None


@bp.get("/openapi.json")
def describe() -> Response:
    """The OpenAPI 3.1 description of this API."""
    return jsonify(openapi.document())
