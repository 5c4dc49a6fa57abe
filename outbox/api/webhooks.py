"""Webhook endpoints over the API: list, register (the secret in that answer only), remove."""

import json
from typing import Any

from flask import Response, jsonify, request, url_for

from outbox.api.blueprint import Refused, bp
from outbox.capabilities.webhooks import endpoints, store
from outbox.core import untrusted_json
from outbox.models import WebhookDelivery, WebhookEndpoint
from outbox.models.db import db
from outbox.queue.wire import iso

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
    shape = 'the body must be a JSON object: {"url": ..., "events": [...]}'
    try:
        body = untrusted_json.loads(request.get_data()) if request.is_json else None
    except ValueError as exc:
        raise Refused(400, f"{shape}; it {exc}") from None
    if not isinstance(body, dict):
        raise Refused(400, shape)
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


def _found(endpoint_id: int) -> WebhookEndpoint:
    endpoint = endpoints.find(endpoint_id)
    if endpoint is None:
        raise Refused(404, f"no webhook endpoint {endpoint_id}")
    return endpoint


@bp.get("/webhooks/<int:endpoint_id>")
def show_webhook(endpoint_id: int) -> Response:
    """One endpoint, without its secret."""
    return jsonify(endpoint_json(_found(endpoint_id)))


@bp.post("/webhooks/<int:endpoint_id>/enable")
def enable_webhook(endpoint_id: int) -> Response:
    """Deliver to the endpoint again (its waiting deliveries go at the workers' next run)."""
    _found(endpoint_id)
    endpoints.enable(endpoint_id)
    return jsonify(endpoint_json(_found(endpoint_id)))


@bp.post("/webhooks/<int:endpoint_id>/disable")
def disable_webhook(endpoint_id: int) -> Response:
    """Stop delivering to the endpoint and making deliveries for it."""
    _found(endpoint_id)
    endpoints.disable(endpoint_id)
    db.session.expire_all()
    return jsonify(endpoint_json(_found(endpoint_id)))


def delivery_json(row: WebhookDelivery) -> dict[str, Any]:
    return {"id": row.id, "event_id": row.event_id, "type": row.kind, "status": row.status,
            "attempts": row.attempts, "next_attempt_at": iso(row.next_attempt_at),
            "last_attempt_at": iso(row.last_attempt_at), "response_code": row.response_code,
            "latency_ms": row.latency_ms, "response": row.response, "error": row.error,
            "created_at": iso(row.created_at), "payload": json.loads(row.payload)}  # fmt: skip


@bp.get("/webhooks/<int:endpoint_id>/deliveries")
def list_deliveries(endpoint_id: int) -> Response:
    """The endpoint's deliveries newest first, a keyset page at a time (before=<id>)."""
    _found(endpoint_id)
    before = request.args.get("before")
    unknown = sorted(set(request.args) - {"before"})
    if unknown or (before is not None and not (before.isdigit() and 0 < int(before) < 2**63)):
        errors = {name: "is not a parameter here" for name in unknown}
        if before is not None and "before" not in errors:
            errors["before"] = "must be a delivery id (a positive integer)"
        raise Refused(422, "bad parameters: " + ", ".join(sorted(errors)), errors=errors)
    rows, older = store.of_endpoint(endpoint_id, int(before) if before else None)
    following = (url_for("api.list_deliveries", endpoint_id=endpoint_id, before=older)
                 if older else None)  # fmt: skip
    return jsonify(deliveries=[delivery_json(row) for row in rows], next=following)


@bp.delete("/webhooks/<int:endpoint_id>")
def delete_webhook(endpoint_id: int) -> tuple[str, int]:
    """Remove an endpoint and its deliveries."""
    if not endpoints.remove(endpoint_id):
        raise Refused(404, f"no webhook endpoint {endpoint_id}")
    return "", 204
