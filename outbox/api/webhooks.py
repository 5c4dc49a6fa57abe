"""Webhook endpoints over the API: list, register (the secret in that answer only), remove."""

from typing import Any

from flask import Response, jsonify, request, url_for

from ..events import iso
from ..models import WebhookEndpoint
from ..webhooks import endpoints
from .blueprint import Refused, bp

FIELDS = {"url", "events"}  # what POST /api/webhooks takes


def endpoint_json(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint as the API shows it: never its secret."""
    return {"id": endpoint.id, "url": endpoint.url, "events": endpoint.events.split(),
            "enabled": endpoint.enabled, "disabled_at": iso(endpoint.disabled_at),
            "disabled_reason": endpoint.disabled_reason, "created_at": iso(endpoint.created_at),
            "created_by": endpoint.created_by}  # fmt: skip


@bp.get("/webhooks")
def list_webhooks() -> Response:
    """Every endpoint, oldest first (the manage scope: URLs may carry a receiver's key)."""
    return jsonify(webhooks=[endpoint_json(e) for e in endpoints.listed()])


@bp.post("/webhooks")
def create_webhook() -> tuple[Response, int, dict[str, str]]:
    """Register an endpoint; the answer carries its signing secret, this once."""
    body = request.get_json(silent=True) if request.is_json else None
    if not isinstance(body, dict):
        raise Refused(400, 'the body must be a JSON object: {"url": ..., "events": [...]}')
    unknown = sorted(set(body) - FIELDS)
    errors = {name: "is not a field of a webhook endpoint" for name in unknown}
    url, chosen = body.get("url"), body.get("events")
    if not isinstance(url, str):
        errors["url"] = "is required: an http or https URL"
    if chosen is not None and not (
        isinstance(chosen, list) and all(isinstance(kind, str) for kind in chosen)
    ):
        errors["events"] = "must be a list of event kinds"
    if errors:
        raise Refused(422, "bad fields: " + ", ".join(sorted(errors)), errors=errors)
    try:
        endpoint, secret = endpoints.add(str(url), chosen)
    except endpoints.Invalid as exc:
        field = "events" if "event kind" in str(exc) else "url"
        raise Refused(422, str(exc), errors={field: str(exc)}) from None
    location = url_for("api.show_webhook", endpoint_id=endpoint.id)
    return jsonify({**endpoint_json(endpoint), "secret": secret}), 201, {"Location": location}


@bp.get("/webhooks/<int:endpoint_id>")
def show_webhook(endpoint_id: int) -> Response:
    """One endpoint, without its secret."""
    endpoint = endpoints.find(endpoint_id)
    if endpoint is None:
        raise Refused(404, f"no webhook endpoint {endpoint_id}")
    return jsonify(endpoint_json(endpoint))


@bp.delete("/webhooks/<int:endpoint_id>")
def delete_webhook(endpoint_id: int) -> tuple[str, int]:
    """Remove an endpoint and its deliveries."""
    if not endpoints.remove(endpoint_id):
        raise Refused(404, f"no webhook endpoint {endpoint_id}")
    return "", 204
