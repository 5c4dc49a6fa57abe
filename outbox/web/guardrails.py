"""The guardrails on the dashboard: resuming a domain's broadcast mail, answered in place."""

from flask import Blueprint, Response, abort, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required

from outbox.auth import audit
from outbox.capabilities.guardrails import board, pauses
from outbox.models import utcnow
from outbox.web.forms import ActionForm
from outbox.web.roles import requires

bp = Blueprint("guardrails", __name__, url_prefix="/guardrails")
bp.before_request(login_required(lambda: None))


@bp.post("/<domain>/resume")
@requires("guardrails")
def resume(domain: str) -> ResponseReturnValue:
    """Resume a domain's broadcast mail; htmx gets the guardrails' part with what happened."""
    if not ActionForm().validate_on_submit():
        abort(400)
    lifted = pauses.resume(domain, current_user.email)
    if lifted is not None:
        audit.record("guardrail resume", detail=lifted.domain)
        notice, error = f"Resumed broadcast mail from {lifted.domain}.", None
    else:
        notice, error = None, f"{pauses.normal(domain)} is not paused: nothing to resume."
    if not (request.headers.get("HX-Request") and not request.headers.get("HX-Boosted")):
        return redirect(url_for("dashboard.index"))
    html = render_template("_guardrails.html", guardrails=board.board(utcnow()),
                           guardrail_notice=notice, guardrail_error=error)  # fmt: skip
    response = Response(html)  # a refusal too: htmx swaps in only a 2xx answer
    response.headers["Vary"] = "HX-Request"
    return response
