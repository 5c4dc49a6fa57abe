"""The bounce inbox: every mail that came back, what it turned out to be, and the mail itself."""

from flask import Blueprint, Response, abort, render_template, request
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.capabilities.bounces import inbox
from outbox.models import ID_RANGE, BounceMail

bp = Blueprint("bounces", __name__, url_prefix="/bounces")
bp.before_request(login_required(lambda: None))

# The raw mail is shown as text and nothing else: no scripts, no loads, no HTML.
RAW_POLICY = "sandbox; default-src 'none'"


@bp.get("")
def index() -> ResponseReturnValue:
    chosen = request.args.get("kind", "all")
    if chosen not in inbox.FILTERS:
        abort(404)
    before = request.args.get("before", type=int)
    if before is not None and before not in ID_RANGE:
        abort(400, description="before must be a bounce mail id")
    rows, older = inbox.page(chosen, before)
    return render_template("bounces/index.html", rows=rows, older=older, chosen=chosen,
                           filters=inbox.FILTERS, reports=inbox.REPORTS)  # fmt: skip


def _mail(pk: int) -> BounceMail:
    found = inbox.find(pk)
    if found is None:
        abort(404)
    return found


@bp.get("/<int:bounce_pk>")
def show(bounce_pk: int) -> ResponseReturnValue:
    mail = _mail(bounce_pk)
    return render_template("bounces/show.html", mail=mail, text=_text(mail.raw))


@bp.get("/<int:bounce_pk>/raw")
def raw(bounce_pk: int) -> ResponseReturnValue:
    """The mail as it came, as text/plain: a browser never renders it as HTML."""
    response = Response(_mail(bounce_pk).raw, mimetype="text/plain")
    response.headers["Content-Type"] = "text/plain; charset=utf-8"
    response.headers["Content-Security-Policy"] = RAW_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Disposition"] = f'inline; filename="bounce-{bounce_pk}.eml.txt"'
    return response


def _text(raw: bytes) -> str:
    """The raw mail as text for the page: bytes that are not UTF-8 shown as replacements."""
    return raw.decode("utf-8", errors="replace")
