"""Signing staff in and out."""

from flask import Blueprint, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_user, logout_user
from werkzeug.wrappers import Response

from outbox.auth import accounts, audit
from outbox.web.forms import SignInForm
from outbox.web.links import local_path

bp = Blueprint("auth", __name__)


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> ResponseReturnValue:
    form = SignInForm()
    if not form.validate_on_submit():
        return render_template("auth/sign_in.html", form=form)
    try:
        user = accounts.sign_in(form.email.data or "", form.password.data or "",
                                request.remote_addr or "unknown")  # fmt: skip
    except accounts.TooManyFailures as exc:
        form.form_errors.append(f"Too many failed sign-ins {exc.whose}; {exc}.")
        page = render_template("auth/sign_in.html", form=form)
        return page, 429, {"Retry-After": str(exc.retry_after)}
    if user is None:
        form.form_errors.append("Wrong email or password.")
        return render_template("auth/sign_in.html", form=form), 401
    login_user(user)
    audit.record("sign_in")
    return redirect(local_path(request.args.get("next"), url_for("dashboard.index")))


@bp.post("/sign-out")
def sign_out() -> Response:
    if current_user.is_authenticated:
        audit.record("sign_out")
        accounts.sign_out(current_user)  # a copy of the cookie ends too
    logout_user()
    return redirect(url_for("auth.sign_in"))
