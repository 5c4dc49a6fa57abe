"""The admin pages: staff accounts and their roles, and the audit trail."""

import json
from typing import Any

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.auth import accounts, audit, tokens
from outbox.core.roles import ACTIONS, ROLES, SCOPES
from outbox.models import ID_RANGE
from outbox.web.roles import requires

bp = Blueprint("admin", __name__, url_prefix="/admin")
bp.before_request(login_required(lambda: None))


@bp.get("/accounts")
@requires("accounts")
def account_list() -> ResponseReturnValue:
    return render_template("admin/accounts.html", users=accounts.listed(), roles=ROLES)


def _done(action: str, *args: str) -> ResponseReturnValue:
    try:
        getattr(accounts, action)(*args)
    except accounts.AccountError as exc:
        flash(f"Not done: {exc}.", "refused")
    else:
        flash("Done.")
    return redirect(url_for("admin.account_list"))


@bp.post("/accounts")
@requires("accounts")
def account_create() -> ResponseReturnValue:
    form = request.form
    return _done("create_user", form.get("email", ""), form.get("password", ""),
                 form.get("role", "viewer"))  # fmt: skip


@bp.post("/accounts/role")
@requires("accounts")
def account_role() -> ResponseReturnValue:
    return _done("set_role", request.form.get("email", ""), request.form.get("role", ""))


@bp.post("/accounts/delete")
@requires("accounts")
def account_delete() -> ResponseReturnValue:
    return _done("delete_user", request.form.get("email", ""))


def _tokens_page(made: tuple[str, str] | None = None, error: str | None = None) -> str:
    """The API tokens; after a creation, the new token, shown this once."""
    return render_template(
        "admin/tokens.html", rows=tokens.listed(), scopes=SCOPES, made=made, error=error
    )


@bp.get("/tokens")
@requires("tokens")
def token_list() -> ResponseReturnValue:
    return _tokens_page()


@bp.post("/tokens")
@requires("tokens")
def token_create() -> ResponseReturnValue:
    name = request.form.get("name", "").strip()
    if not name:
        return _tokens_page(error="Name the token."), 422
    try:
        token = tokens.create(name, request.form.getlist("scope"))
    except ValueError as exc:
        return _tokens_page(error=f"Not made: {exc}."), 422
    return _tokens_page(made=(name, token))  # never in a redirect or the session cookie


@bp.post("/tokens/revoke")
@requires("tokens")
def token_revoke() -> ResponseReturnValue:
    name = request.form.get("name", "")
    flash(f"Revoked {name}." if tokens.revoke(name) else f"No live token named {name}.")
    return redirect(url_for("admin.token_list"))


@bp.get("/audit")
@requires("audit")
def audit_list() -> ResponseReturnValue:
    args = request.args
    message, older = args.get("message", "").strip(), args.get("before", "").strip()
    if message and not (message.isdigit() and int(message) in ID_RANGE):
        abort(400, description=f"message must be a message number, 1 to {ID_RANGE[-1]}")
    if older and not (older.isdigit() and int(older) in ID_RANGE):
        abort(400, description=f"before must be an event number, 1 to {ID_RANGE[-1]}")
    filters = audit.Filters(actor=args.get("actor", "").strip() or None,
                            action=args.get("action", "").strip() or None,
                            message_pk=int(message) if message else None)  # fmt: skip
    events, before = audit.page(filters, int(older) if older else None)
    kept = {k: v for k in ("actor", "action", "message") if (v := args.get(k))}
    return render_template("admin/audit.html", events=events, before=before, kept=kept,
                           filters=filters, actions=sorted(ACTIONS))  # fmt: skip


def detail_words(text: str | None) -> str:
    """An audit event's detail as the page says it: "ids: 3, 4; moved: 2", not its JSON."""
    if not text or text[0] not in "{[":
        return text or ""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return _words(value)


def _words(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{str(k).replace('_', ' ')}: {_words(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_words(v) for v in value) or "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "none" if value is None else str(value)
