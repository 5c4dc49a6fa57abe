"""The guardrails on the dashboard: resuming a domain's broadcast mail, answered in place."""

from flask import Blueprint, Response, abort, redirect, render_template, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required

from outbox.auth import audit
from outbox.capabilities.guardrails import board, pauses
from outbox.models import utcnow
from outbox.web.forms import ActionForm
from outbox.web.notice import is_htmx, said
from outbox.web.roles import requires

bp = Blueprint("guardrails", __name__, url_prefix="/guardrails")
bp.before_request(login_required(lambda: None))


@bp.post("/<domain>/resume")
@requires("guardrails")
def resume(domain: str) -> ResponseReturnValue:
    """Resume a domain's broadcast mail; htmx gets the guardrails' part as it is now, and
    what happened in the page's notice, which the live part's next push leaves alone."""
    if not ActionForm().validate_on_submit():
        abort(400)
    lifted = pauses.resume(domain, current_user.email)
    if lifted is not None:
        audit.record("guardrail resume", detail=lifted.domain)
        text, refused = f"Resumed broadcast mail from {lifted.domain}.", False
    else:
        text, refused = f"{pauses.normal(domain)} is not paused: nothing to resume.", True
    if not is_htmx():
        return said(redirect(url_for("dashboard.index")), text, refused=refused)
    html = render_template("_guardrails.html", guardrails=board.board(utcnow()))
    # A refusal too is swapped in (htmx swaps only a 2xx answer): the part as it is now.
    response = said(Response(html), text, refused=refused)
    response.headers["Vary"] = "HX-Request"
    return response
