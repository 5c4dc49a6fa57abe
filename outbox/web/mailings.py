"""The mailings pages: the list, one mailing's progress, and pause, resume, cancel."""

from typing import Any

from flask import Blueprint, Response, abort, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.auth import audit
from outbox.capabilities.mailings import control, reads
from outbox.capabilities.mailings.intake import OPEN, Refusal
from outbox.models import ID_RANGE, Mailing
from outbox.models.db import db
from outbox.web.confirm import confirm_page, confirmed
from outbox.web.forms import ActionForm
from outbox.web.notice import plural, said
from outbox.web.roles import requires

bp = Blueprint("mailings", __name__, url_prefix="/mailings")
bp.before_request(login_required(lambda: None))

RECIPIENTS_SHOWN = 50  # on a mailing's page, the first ones
IN_FLIGHT = ("queued", "sending", "deferred")
CANCEL_DETAIL = "Its waiting recipients are cancelled; mails being sent now finish."
# What the notice says after each action; rows: how many of its messages it moved.
DONE = {
    "pause": "Mailing #{pk} is paused: {rows} held until it resumes.",
    "resume": "Mailing #{pk} resumes: {rows} due again.",
    "cancel": "Mailing #{pk} is cancelled: {rows} cancelled.",
}


@bp.get("")
def index() -> ResponseReturnValue:
    """Mailings newest first, a page at a time by id, each with its progress."""
    before = request.args.get("before", type=int)
    if before is not None and before not in ID_RANGE:
        abort(400, description="before must be a mailing id")
    shown, older = reads.page(before)
    progress = control.progress([m.id for m in shown]) if shown else {}
    after = url_for("mailings.index", before=older) if older else None
    return render_template("mailings/index.html", mailings=shown, progress=progress, after=after)


def _mailing(mailing_id: int) -> Mailing:
    found = reads.find(mailing_id)
    if found is None:
        abort(404)
    return found


def _progress(mailing: Mailing) -> dict[str, Any]:
    counts = control.progress([mailing.id])[mailing.id]
    waiting = mailing.state == OPEN and any(counts[s] for s in IN_FLIGHT)
    return dict(mailing=mailing, counts=counts, in_flight=waiting or counts["sending"] > 0,
                finished=not any(counts[s] for s in IN_FLIGHT), form=ActionForm())  # fmt: skip


def _fragment(mailing: Mailing) -> Response:
    """The live part; 286 tells htmx to stop polling once nothing is in flight."""
    context = _progress(mailing)
    response = Response(render_template("mailings/_progress.html", **context),
                        status=200 if context["in_flight"] else 286)  # fmt: skip
    response.headers["Vary"] = "HX-Request"
    return response


@bp.get("/<int:mailing_id>")
def show(mailing_id: int) -> ResponseReturnValue:
    mailing = _mailing(mailing_id)
    if request.headers.get("HX-Request"):
        return _fragment(mailing)
    recipients = reads.recipients(mailing.id, RECIPIENTS_SHOWN)
    page = render_template("mailings/show.html", recipients=recipients, **_progress(mailing))
    response = Response(page)
    response.headers["Vary"] = "HX-Request"
    return response


def _act(mailing_id: int, action: str) -> ResponseReturnValue:
    """Pause, resume or cancel the mailing; the live part for htmx, else the page again."""
    if not ActionForm().validate_on_submit():
        abort(400)
    mailing = _mailing(mailing_id)
    if action == "cancel" and not confirmed():
        back = url_for("mailings.show", mailing_id=mailing_id)
        return confirm_page(f"Cancel mailing #{mailing_id}?", CANCEL_DETAIL, request.path, back)
    try:
        moved = getattr(control, action)(mailing_id)
    except Refusal as exc:
        abort(409, description=exc.error)
    audit.record(f"mailing_{action}", None, {"mailing": mailing_id, "moved": moved})
    db.session.expire_all()
    words = DONE[action].format(pk=mailing_id, rows=plural(moved, "waiting message"))
    if request.headers.get("HX-Request"):
        return said(_fragment(_mailing(mailing.id)), words)
    return said(redirect(url_for("mailings.show", mailing_id=mailing_id)), words)


@bp.post("/<int:mailing_id>/pause")
@requires("cancel")
def pause(mailing_id: int) -> ResponseReturnValue:
    return _act(mailing_id, "pause")


@bp.post("/<int:mailing_id>/resume")
@requires("cancel")
def resume(mailing_id: int) -> ResponseReturnValue:
    return _act(mailing_id, "resume")


@bp.post("/<int:mailing_id>/cancel")
@requires("cancel")
def cancel(mailing_id: int) -> ResponseReturnValue:
    return _act(mailing_id, "cancel")
