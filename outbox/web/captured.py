"""The Captured page: mail kept instead of sent (OUTBOX_DELIVERY), each as its recipient sees it."""

from flask import Blueprint, Response, abort, render_template, request
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.capabilities.capture import shown, store
from outbox.models import ID_RANGE, Captured
from outbox.web import CONTENT_SECURITY_POLICY
from outbox.web.downloads import as_download
from outbox.web.shown import SHOWN_HTML_CHARS, without_remote

bp = Blueprint("captured", __name__, url_prefix="/captured")
bp.before_request(login_required(lambda: None))

# The HTML part is shown in an iframe's srcdoc, which takes the page's policy: the page's own,
# with the mail's inline styles allowed (the frame runs no script: sandbox="" and script-src).
SHOW_POLICY = CONTENT_SECURITY_POLICY.replace(
    "style-src 'self'", "style-src 'self' 'unsafe-inline'"
)
# The raw mail is shown as text and nothing else: no scripts, no loads, no HTML.
RAW_POLICY = "sandbox; default-src 'none'"


@bp.get("")
def index() -> ResponseReturnValue:
    before = request.args.get("before", type=int)
    if before is not None and before not in ID_RANGE:
        abort(400, description="before must be a captured mail id")
    rows, older = store.page(before)
    return render_template("captured/index.html", rows=rows, older=older)


def _mail(captured_pk: int) -> Captured:
    found = store.find(captured_pk)
    if found is None:
        abort(404)
    return found


@bp.get("/<int:captured_pk>")
def show(captured_pk: int) -> ResponseReturnValue:
    mail = _mail(captured_pk)
    parts = shown.read(mail.raw)
    html = without_remote(parts.html[:SHOWN_HTML_CHARS]) if parts.html else None
    response = Response(render_template(
        "captured/show.html", mail=mail, parts=parts, html=html,
        source=mail.raw.decode("utf-8", errors="replace"),
    ))  # fmt: skip
    response.headers["Content-Security-Policy"] = SHOW_POLICY
    return response


@bp.get("/<int:captured_pk>/raw")
def raw(captured_pk: int) -> ResponseReturnValue:
    """The mail as it would have gone, as text/plain: a browser never renders it as HTML."""
    response = Response(_mail(captured_pk).raw, mimetype="text/plain")
    response.headers["Content-Type"] = "text/plain; charset=utf-8"
    response.headers["Content-Security-Policy"] = RAW_POLICY
    response.headers["Content-Disposition"] = f'inline; filename="captured-{captured_pk}.eml.txt"'
    return response


@bp.get("/<int:captured_pk>/attachments/<int:index>")
def attachment(captured_pk: int, index: int) -> ResponseReturnValue:
    """One attachment of a captured mail, saved as a file, never shown in the page's origin."""
    found = shown.attachment(_mail(captured_pk).raw, index)
    if found is None:
        abort(404)
    name, _, data = found
    response = Response(data, mimetype="application/octet-stream")
    response.headers["Content-Security-Policy"] = RAW_POLICY
    return as_download(response, name)
