"""The suppression list's page: search it, add an address, take one off, CSV out and in."""

import io
from typing import Any

from flask import (
    Blueprint,
    Response,
    abort,
    flash,
    redirect,
    render_template,
    request,
    stream_with_context,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import login_required
from flask_wtf import FlaskForm
from flask_wtf.file import FileField, FileRequired
from wtforms import IntegerField, StringField
from wtforms.validators import NumberRange, Optional

from outbox.capabilities.suppression import manage
from outbox.capabilities.suppression.screen import Rejected
from outbox.models import utcnow
from outbox.web.confirm import confirm_page, confirmed
from outbox.web.downloads import as_download
from outbox.web.forms import ActionForm
from outbox.web.roles import requires

bp = Blueprint("suppressions", __name__, url_prefix="/suppressions")
bp.before_request(login_required(lambda: None))


class SuppressForm(FlaskForm):
    address = StringField("Address")
    reason = StringField("Reason")
    days = IntegerField("Expires after (days)", validators=[Optional(), NumberRange(1, 36500)])


class ImportForm(FlaskForm):
    file = FileField("CSV file", validators=[FileRequired("choose a CSV file")])


def _page(
    form: SuppressForm | None = None,
    error: str | None = None,
    code: int = 200,
    imported: ImportForm | None = None,
) -> ResponseReturnValue:
    """The list (newest first, searched, a page at a time), with the add and import forms."""
    search = request.args.get("q", "").strip()
    found = manage.page(search, request.args.get("before", type=int))
    shown = render_template(
        "suppressions/index.html",
        entries=found.entries,
        before=found.before,
        search=search,
        form=form or SuppressForm(formdata=None),
        imported=imported or ImportForm(formdata=None),
        error=error,
        action=ActionForm(),
        now=utcnow(),
    )
    return shown, code


@bp.get("")
def index() -> ResponseReturnValue:
    return _page()


@bp.post("")
@requires("suppress")
def add() -> ResponseReturnValue:
    form = SuppressForm()
    if not form.validate_on_submit():
        problems = "; ".join(f"{n}: {e[0]}" for n, e in form.errors.items() if n != "csrf_token")
        if "csrf_token" in form.errors:
            abort(400, description="The form expired; load the page again.")
        return _page(form, f"Not added: {problems}.", 422)
    try:
        entry, new = manage.add(
            form.address.data or "", form.reason.data, manage.expiry(days=form.days.data)
        )
    except manage.Invalid as exc:
        return _page(form, f"Not added: {exc}.", 422)
    flash(f"Suppressed {entry.address}." if new else f"{entry.address} was on the list already.")
    return redirect(url_for("suppressions.index", q=entry.address))


@bp.post("/remove")
@requires("suppress")
def remove() -> ResponseReturnValue:
    if not ActionForm().validate_on_submit():
        abort(400)
    address = request.form.get("address", "")
    if not confirmed():
        return confirm_page(
            f"Remove {address} from the suppression list?",
            "The next message to it is sent.",
            url_for("suppressions.remove"),
            url_for("suppressions.index"),
            {"address": address},
        )
    try:
        found = manage.remove(address)
    except manage.Invalid as exc:
        abort(400, description=str(exc))
    flash(f"Removed {found.address}." if found else f"{address} was not on the list.")
    target = url_for("suppressions.index")
    if request.headers.get("HX-Request"):  # asked in htmx's dialog: the whole page again
        return Response(status=204, headers={"HX-Redirect": target})
    return redirect(target)


@bp.get("/export.csv")
def export() -> Response:
    response = Response(stream_with_context(manage.export_rows()), mimetype="text/csv")
    name = f"suppressions-{utcnow():%Y%m%d-%H%M%S}.csv"
    return as_download(response, name)


@bp.post("/import")
@requires("suppressions_import")
def import_csv() -> ResponseReturnValue:
    form = ImportForm()
    if not form.validate_on_submit():
        if "csrf_token" in form.errors:
            abort(400, description="The form expired; load the page again.")
        return _page(error="Not imported: choose a CSV file.", code=422, imported=form)
    try:
        text = io.TextIOWrapper(form.file.data.stream, encoding="utf-8-sig", newline="")
        done = manage.import_csv(text)
    except (manage.Invalid, UnicodeDecodeError) as exc:
        return _page(error=f"Not imported: {exc}.", code=422, imported=form)
    flash(f"Imported {done.added} addresses; {done.listed} were on the list already.")
    return redirect(url_for("suppressions.index"))


@bp.app_errorhandler(Rejected)
def rejected(exc: Rejected) -> Any:
    """OUTBOX_SUPPRESSED=reject meets a page (compose): a 422 page naming the addresses.

    The API's own handler (outbox.api.suppressions) answers its requests first."""
    detail = "; ".join(f"{f['address']} is {f['reason']}" for f in exc.found)
    page = render_template(
        "error.html",
        code=422,
        title="Not queued",
        text="A recipient is on the suppression list.",
        detail=detail,
    )
    return page, 422
