"""The staff pages: sign-in protection, security headers and the page blueprints."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from flask import (
    Blueprint,
    Flask,
    Request,
    Response,
    g,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from flask_login import current_user
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from outbox.auth import accounts
from outbox.core import latency
from outbox.core.recipients import partly_delivered
from outbox.extensions import csrf, login_manager
from outbox.models import utcnow
from outbox.ops import probes
from outbox.web import notice

# Only the app's own scripts and styles; the HTML body of a message gets a stricter
# policy of its own (see messages.html_body).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'self'"
)
# The blueprints of the pages.
PAGES = ("auth", "dashboard", "messages", "bulk", "admin", "suppressions", "bounces", "webhooks",
         "routes", "mailings", "domains", "captured", "guardrails")  # fmt: skip
# What the error pages say, by status code.
ERRORS = {
    400: ("Bad request", "The page could not make sense of what was sent."),
    403: ("Not allowed for your role", "Ask an admin if you need to do this."),
    404: ("Not found", "There is no page at this address, or the message is gone."),
    405: ("Not allowed", "This address does not take that kind of request."),
    409: ("Not possible now", "The message is no longer in a state for that."),
    500: ("Something went wrong", "The page failed; the error is in the server's log."),
}


def _is_api() -> bool:
    return request.path.startswith("/api/")


def _sessionless() -> bool:
    """The API, and the probes and metrics (probes.PATHS): no cookie session."""
    return _is_api() or request.path in probes.PATHS


class HttpsAwareSessions(SecureCookieSessionInterface):
    """Session cookies marked Secure whenever the request came over HTTPS; none for the API
    nor the probes.

    The API authenticates each request by its token: opening (unsigning) and saving a
    cookie session there would only cost time.
    """

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if _sessionless():
            return None  # Flask puts a NullSession in, which refuses to be written
        return super().open_session(app, request)

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"]) or request.is_secure


def security_headers(response: Response) -> Response:
    """The pages' headers, on pages, static files and URLs no route takes.

    An answer from another blueprint that brings a policy of its own (the API's) keeps it.
    """
    if request.blueprint not in PAGES and "Content-Security-Policy" in response.headers:
        return response
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
    return response


def not_stored(response: Response) -> Response:
    """Pages and API answers kept out of every cache: they show mail, accounts, secrets.

    A browser's back button or a shared proxy would otherwise keep a signed-in page (or a
    webhook's secret) after sign-out; static files and the probes stay cacheable.
    """
    if request.blueprint in PAGES or _is_api():
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def when(moment: datetime | None) -> str:
    """A stored UTC time as the pages show it."""
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else ""


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """A stored UTC time relative to now, the way people say it: "3 min ago", "in 2 h"."""
    if moment is None:
        return ""
    span = ((now or utcnow()) - moment).total_seconds()
    ahead, seconds = span < 0, abs(int(span))
    if seconds < 10:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            amount = f"{seconds // size} {unit}"
            break
    return f"in {amount}" if ahead else f"{amount} ago"


def far_ahead(moment: datetime | None, now: datetime | None = None) -> bool:
    """Whether a time is more than a day ahead: the pages give its date beside "in 27 d"."""
    return moment is not None and moment - (now or utcnow()) > timedelta(days=1)


def age(span: timedelta) -> str:
    """A duration the short way: 45s, 12m, 3h 5m, 2d 4h."""
    seconds = max(int(span.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes}m"
    if days == 0:
        return f"{hours}h {minutes % 60}m"
    return f"{days}d {hours % 24}h"


def unauthorized() -> Any:
    """Send people to the sign-in page; htmx requests are told to go there whole."""
    # Only a page can be returned to; after a refused POST, start from the dashboard.
    back = request.full_path.rstrip("?") if request.method == "GET" else None
    target = url_for("auth.sign_in", next=back)
    if request.headers.get("HX-Request"):
        return Response(status=401, headers={"HX-Redirect": target})
    return redirect(target)


def refusal(title: str, detail: str | None) -> str:
    """An error as the notice after an htmx action says it: "Not possible now: the reason."."""
    if not detail:
        return f"{title}."
    return f"{title}: {detail[0].lower()}{detail[1:].rstrip('.')}."


def error_page(exc: HTTPException) -> Response:
    """A styled page with the navigation, for an error on a page.

    It reads no database: the user shown is the one this request loaded already, if any,
    so a 500 page renders while the database is down.
    """
    code = exc.code or 500
    title, text = ERRORS.get(code, (exc.name, ""))
    detail = exc.description if code in (400, 403, 409) else None
    # Any other error may load the user, to show the navigation.
    staff = g.get("_login_user") if code == 500 else current_user
    known = staff if getattr(staff, "is_authenticated", False) else None
    page = render_template("error.html", code=code, title=title, text=text, detail=detail,
                           staff=known)  # fmt: skip
    response = Response(page, status=code)
    if notice.is_htmx():  # htmx swaps no error in: the notice says it where the click was
        response.headers["HX-Trigger"] = notice.trigger(refusal(title, detail or text),
                                                        refused=True)  # fmt: skip
    return response


def page_errors(app: Flask, blueprints: list[Blueprint]) -> None:
    """Error pages for the pages, while /api/ keeps its JSON.

    A URL no route takes has no blueprint: its 404 and 405 are the app's, and a handler
    registered before (the API's, for /api/) keeps answering its own URLs. The other
    errors are the page blueprints' own, so the API's handlers never meet them.
    """
    for code in (404, 405):
        earlier = list(app.error_handler_spec[None][code].values())

        def handle(exc: HTTPException, earlier: list[Callable[..., Any]] = earlier) -> Any:
            if _is_api():
                return earlier[0](exc) if earlier else exc
            if request.path in probes.PATHS:
                return exc  # Werkzeug's own short page: no session, no CSRF token
            return error_page(exc)

        app.register_error_handler(code, handle)
    for blueprint in blueprints:
        # The blueprints outlive an app: another create_app finds them handled already.
        for code in (400, 403, 409, 500):
            if not blueprint.error_handler_spec[None][code]:
                blueprint.register_error_handler(code, error_page)


def init_app(app: Flask) -> None:
    """Bind sign-in, CSRF and the page blueprints to the app."""
    from outbox.web import admin, auth, bounces, bulk, dashboard, messages, suppressions, webhooks
    from outbox.web import captured as captured_pages
    from outbox.web import domains as domain_pages
    from outbox.web import guardrails as guardrail_pages
    from outbox.web import mailings as mailing_pages  # noqa: I001
    from outbox.web import routes as route_pages
    from outbox.web.roles import can

    # Flask's defaults hold the key already (as None), so setdefault would not set it.
    app.config["SESSION_COOKIE_SAMESITE"] = app.config["SESSION_COOKIE_SAMESITE"] or "Lax"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    if app.config["TRUST_PROXY"]:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1)  # type: ignore[method-assign]
    app.session_interface = HttpsAwareSessions()
    login_manager.init_app(app)
    login_manager.user_loader(accounts.load)
    login_manager.unauthorized_handler(unauthorized)
    csrf.init_app(app)
    blueprints = [auth.bp, dashboard.bp, messages.bp, bulk.bp, admin.bp, suppressions.bp,
                  bounces.bp, webhooks.bp]  # fmt: skip
    blueprints.append(route_pages.bp)
    blueprints.append(mailing_pages.bp)
    blueprints.append(domain_pages.bp)
    blueprints.append(captured_pages.bp)
    blueprints.append(guardrail_pages.bp)
    page_errors(app, blueprints)
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    app.after_request(security_headers)
    app.after_request(not_stored)
    app.add_template_filter(when)
    app.add_template_filter(age)
    app.add_template_filter(ago)
    app.add_template_filter(far_ahead)
    app.add_template_filter(admin.detail_words, "in_words")
    app.add_template_filter(partly_delivered, "partly")
    app.add_template_filter(latency.in_words, "took")
    app.add_template_global(can)
