"""The staff pages: sign-in protection, security headers and the page blueprints."""

from datetime import datetime, timedelta
from typing import Any

from flask import Flask, Request, Response, redirect, request, url_for
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix

from .. import accounts
from ..extensions import csrf, login_manager

# Only the app's own scripts and styles; the HTML body of a message gets a stricter
# policy of its own (see messages.html_body).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'self'"
)
# The blueprints of the pages.
PAGES = ("auth", "dashboard", "messages")


def _is_api() -> bool:
    return request.path.startswith("/api/")


class HttpsAwareSessions(SecureCookieSessionInterface):
    """Session cookies marked Secure whenever the request came over HTTPS; none for the API.

    The API authenticates each request by its token: opening (unsigning) and saving a
    cookie session there would only cost time.
    """

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if _is_api():
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


def when(moment: datetime | None) -> str:
    """A stored UTC time as the pages show it."""
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else ""


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


def init_app(app: Flask) -> None:
    """Bind sign-in, CSRF and the page blueprints to the app."""
    from . import auth, dashboard, messages

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
    for blueprint in (auth.bp, dashboard.bp, messages.bp):
        app.register_blueprint(blueprint)
    app.after_request(security_headers)
    app.add_template_filter(when)
    app.add_template_filter(age)
