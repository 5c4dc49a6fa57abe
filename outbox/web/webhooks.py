"""The admins' webhook pages: endpoints (add, enable, disable, remove), each endpoint's
deliveries with "send again" and "send a test event", and the banner of disabled ones."""

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.capabilities.webhooks import endpoints, events, store
from outbox.models import WebhookEndpoint
from outbox.web.confirm import confirm_page, confirmed
from outbox.web.links import local_path
from outbox.web.roles import can, requires

bp = Blueprint("webhooks", __name__, url_prefix="/admin/webhooks")
bp.before_request(login_required(lambda: None))


@bp.app_template_global()
def disabled_webhooks() -> list[WebhookEndpoint]:
    """The disabled endpoints, for the banner admins see on every page (none for others)."""
    return endpoints.disabled() if can("webhooks") else []


def _list_page(made: tuple[WebhookEndpoint, str] | None = None, error: str | None = None,
               url: str = "", chosen: list[str] | None = None) -> str:  # fmt: skip
    return render_template("webhooks/index.html", rows=endpoints.listed(), kinds=events.KINDS,
                           made=made, error=error, url=url, chosen=chosen)  # fmt: skip


@bp.get("")
@requires("webhooks")
def index() -> ResponseReturnValue:
    return _list_page()


@bp.post("")
@requires("webhooks")
def create() -> ResponseReturnValue:
    url, chosen = request.form.get("url", ""), request.form.getlist("events")
    try:
        made = endpoints.add(url, chosen)
    except endpoints.Invalid as exc:
        return _list_page(error=f"Not added: {exc}.", url=url, chosen=chosen), 422
    return _list_page(made=made)  # the secret: never in a redirect or the session cookie


def _endpoint(endpoint_id: int) -> WebhookEndpoint:
    found = endpoints.find(endpoint_id)
    if found is None:
        abort(404)
    return found


@bp.post("/<int:endpoint_id>/enable")
@requires("webhooks")
def enable(endpoint_id: int) -> ResponseReturnValue:
    _endpoint(endpoint_id)
    flash("Enabled: its waiting deliveries go out." if endpoints.enable(endpoint_id)
          else "It was enabled already.")  # fmt: skip
    return redirect(local_path(request.form.get("next"), url_for("webhooks.index")))


@bp.post("/<int:endpoint_id>/disable")
@requires("webhooks")
def disable(endpoint_id: int) -> ResponseReturnValue:
    _endpoint(endpoint_id)
    flash("Disabled: no events are made for it until it is enabled again."
          if endpoints.disable(endpoint_id) else "It was disabled already.")  # fmt: skip
    return redirect(local_path(request.form.get("next"), url_for("webhooks.index")))


@bp.post("/<int:endpoint_id>/delete")
@requires("webhooks")
def delete(endpoint_id: int) -> ResponseReturnValue:
    endpoint = _endpoint(endpoint_id)
    if not confirmed():
        return confirm_page(f"Remove webhook endpoint {endpoint_id}?",
                            f"{endpoint.url} gets no more events; its deliveries are removed.",
                            request.path, url_for("webhooks.index"))  # fmt: skip
    endpoints.remove(endpoint_id)
    flash(f"Removed endpoint {endpoint_id}.")
    return redirect(url_for("webhooks.index"))


@bp.get("/<int:endpoint_id>")
@requires("webhooks")
def show(endpoint_id: int) -> ResponseReturnValue:
    endpoint = _endpoint(endpoint_id)
    before = request.args.get("before", type=int)
    rows, older = store.of_endpoint(endpoint_id, before)
    return render_template("webhooks/show.html", endpoint=endpoint, rows=rows, older=older)


@bp.post("/<int:endpoint_id>/test")
@requires("webhooks")
def send_test(endpoint_id: int) -> ResponseReturnValue:
    _endpoint(endpoint_id)
    event_id = endpoints.send_test(endpoint_id)
    flash(f"Test event {event_id} queued; the workers send it within seconds." if event_id
          else "Not sent: the endpoint is disabled; enable it first.")  # fmt: skip
    return redirect(url_for("webhooks.show", endpoint_id=endpoint_id))


@bp.post("/<int:endpoint_id>/deliveries/<int:delivery_id>/again")
@requires("webhooks")
def send_again(endpoint_id: int, delivery_id: int) -> ResponseReturnValue:
    _endpoint(endpoint_id)
    flash(f"Delivery {delivery_id} queued again (same webhook-id)."
          if endpoints.send_again(endpoint_id, delivery_id)
          else f"Delivery {delivery_id} is not delivered or failed; nothing done.")  # fmt: skip
    return redirect(url_for("webhooks.show", endpoint_id=endpoint_id))
