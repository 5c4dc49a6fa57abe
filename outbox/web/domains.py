"""The Domains page: each sending domain's DNS checks, their verdicts and what to publish.

The checks run when the page is asked for and are kept DOMAINS_CACHE seconds, so the
page always says something current without asking DNS on every load; "Check again"
asks now and answers in place.
"""

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.capabilities.dkim import published
from outbox.capabilities.domains import doctor
from outbox.web.forms import ActionForm

bp = Blueprint("domains", __name__, url_prefix="/domains")
bp.before_request(login_required(lambda: None))


def _report(refresh: bool = False) -> doctor.Report | str:
    """The report, or why there is none (OUTBOX_DNS_RESOLVERS cannot be used)."""
    try:
        return doctor.cached(refresh)
    except published.BadResolvers as exc:
        return str(exc)


def _shown(found: doctor.Report | str) -> dict[str, object]:
    if isinstance(found, str):
        return {"report": None, "error": found, "form": ActionForm()}
    return {"report": found, "error": None, "form": ActionForm()}


@bp.get("")
def index() -> ResponseReturnValue:
    return render_template("domains/index.html", **_shown(_report()))


@bp.post("/check")
def check() -> ResponseReturnValue:
    """Ask DNS again now; the report in place for htmx, else the page."""
    if not ActionForm().validate_on_submit():
        abort(400)
    found = _report(refresh=True)
    if request.headers.get("HX-Request"):
        return render_template("domains/_report.html", **_shown(found))
    return redirect(url_for("domains.index"))
