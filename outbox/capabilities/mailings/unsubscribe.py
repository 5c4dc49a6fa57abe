"""One-click unsubscribe (RFC 8058): a signed token per recipient, and the page that takes it.

The token names the recipient's message row and address, signed with SECRET_KEY
(itsdangerous): only outbox can make one, and it needs no storage. A POST puts the
address on the suppression list with the reason "unsubscribed" (idempotent); a GET shows
a page with a button that posts, since mail scanners follow links but do not post.
"""

from typing import Any

from flask import Blueprint, Response, abort, current_app, render_template, request, url_for
from itsdangerous import BadSignature, URLSafeSerializer

from outbox.capabilities import suppression
from outbox.extensions import csrf
from outbox.models.db import db

bp = Blueprint("unsubscribe", __name__)
SALT = "outbox.unsubscribe"
REASON = "unsubscribed"


def _signer() -> URLSafeSerializer:
    return URLSafeSerializer(current_app.config["SECRET_KEY"], salt=SALT)


def token(message_pk: int, address: str) -> str:
    """The token of one recipient of one mail."""
    return _signer().dumps([message_pk, address])


def url(token: str, base: str | None) -> str | None:
    """The one-click URL of a token under outbox's public base URL, if one is configured."""
    return f"{base.rstrip('/')}/unsubscribe/{token}" if base else None


def _read(token: str) -> tuple[int, str]:
    try:
        found: Any = _signer().loads(token)
    except BadSignature:
        abort(404)
    return int(found[0]), str(found[1])


@bp.get("/unsubscribe/<token>")
def confirm(token: str) -> str:
    """The page a person reaches from the link: a button that unsubscribes."""
    _, address = _read(token)
    return render_template("unsubscribe.html", address=address, done=False,
                           action=url_for("unsubscribe.unsubscribe", token=token))  # fmt: skip


@bp.post("/unsubscribe/<token>")
@csrf.exempt  # a mail provider's one-click POST carries no session; the token is the proof
def unsubscribe(token: str) -> Response | str:
    """Suppress the token's address ("unsubscribed"); the same answer every time."""
    message_pk, address = _read(token)
    suppression.add(address, REASON, "unsubscribe", message_pk=message_pk)
    db.session.commit()
    if request.form.get("List-Unsubscribe") == "One-Click":  # RFC 8058: a mail client
        return Response("unsubscribed\n", mimetype="text/plain")
    return render_template("unsubscribe.html", address=address, done=True, action="")
