"""Webhook endpoints: adding one (its secret made and shown once), enabling, disabling,
removing; every change audited."""

from collections.abc import Iterable

from flask import current_app
from sqlalchemy import delete, select

from outbox.auth import audit
from outbox.capabilities.webhooks import events, safety, signing, store
from outbox.models import WebhookDelivery, WebhookEndpoint, utcnow
from outbox.models.db import db


class Invalid(ValueError):
    """An endpoint that cannot be added as asked; the text names the problem."""


def kinds_of(chosen: str | Iterable[str] | None) -> str:
    """The kinds an endpoint takes, space-separated: all of them when none are named."""
    names = chosen.replace(",", " ").split() if isinstance(chosen, str) else list(chosen or ())
    unknown = [name for name in names if name not in events.KINDS]
    if unknown:
        raise Invalid(f"unknown event kind {unknown[0]!r}; the kinds are {', '.join(events.KINDS)}")
    return " ".join(kind for kind in events.KINDS if kind in names or not names)


def add(url: str, chosen: str | Iterable[str] | None = None) -> tuple[WebhookEndpoint, str]:
    """Register an endpoint; it and its signing secret (to be shown this once)."""
    url = url.strip()
    kinds = kinds_of(chosen)
    try:
        safety.resolve(url, current_app.config["WEBHOOK_ALLOW_PRIVATE"])
    except safety.Refused as exc:
        raise Invalid(str(exc)) from None
    secret = signing.new_secret()
    endpoint = WebhookEndpoint(url=url, events=kinds, secret=secret, enabled=True,
                               created_at=utcnow(), created_by=audit.actor()[0][:255])  # fmt: skip
    db.session.add(endpoint)
    db.session.commit()
    events.endpoints_changed()
    audit.record("webhook_add", detail={"endpoint": endpoint.id, "url": url, "events": kinds})
    return endpoint, secret


def find(endpoint_id: int) -> WebhookEndpoint | None:
    return db.session.get(WebhookEndpoint, endpoint_id) if 0 < endpoint_id < 2**63 else None


def listed() -> list[WebhookEndpoint]:
    return list(db.session.scalars(select(WebhookEndpoint).order_by(WebhookEndpoint.id)))


def disabled() -> list[WebhookEndpoint]:
    """The endpoints that are off, for the admins' banner (a small table)."""
    off = select(WebhookEndpoint).where(WebhookEndpoint.enabled.is_(False))
    return list(db.session.scalars(off.order_by(WebhookEndpoint.id)))


def enable(endpoint_id: int) -> bool:
    """Deliver to it again: its waiting deliveries go at the workers' next run."""
    endpoint = find(endpoint_id)
    if endpoint is None or endpoint.enabled:
        return False
    endpoint.enabled, endpoint.disabled_at, endpoint.disabled_reason = True, None, None
    db.session.commit()
    events.endpoints_changed()
    audit.record("webhook_enable", detail={"endpoint": endpoint_id})
    return True


def disable(endpoint_id: int) -> bool:
    """Stop delivering to it and making deliveries for it, by a person's choice."""
    who = audit.actor()[0]
    if not store.disable(endpoint_id, f"disabled by {who}"):
        db.session.rollback()
        return False
    db.session.commit()
    audit.record("webhook_disable", detail={"endpoint": endpoint_id})
    return True


def remove(endpoint_id: int) -> bool:
    """Remove an endpoint and its deliveries."""
    endpoint = find(endpoint_id)
    if endpoint is None:
        return False
    url = endpoint.url
    db.session.execute(delete(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id))
    db.session.delete(endpoint)
    db.session.commit()
    audit.record("webhook_remove", detail={"endpoint": endpoint_id, "url": url})
    return True


def send_test(endpoint_id: int) -> str | None:
    """Queue a test event for an enabled endpoint; its webhook-id, or None."""
    endpoint = find(endpoint_id)
    if endpoint is None or not endpoint.enabled:
        return None
    event_id = store.send_test(endpoint_id)
    db.session.commit()
    audit.record("webhook_test", detail={"endpoint": endpoint_id, "event": event_id})
    return event_id


def send_again(endpoint_id: int, delivery_id: int) -> bool:
    """Queue a delivered or failed delivery of this endpoint again (its webhook-id kept)."""
    row = db.session.get(WebhookDelivery, delivery_id) if 0 < delivery_id < 2**63 else None
    if row is None or row.endpoint_id != endpoint_id or not store.send_again(delivery_id):
        db.session.rollback()
        return False
    db.session.commit()
    audit.record("webhook_send_again", detail={"endpoint": endpoint_id, "delivery": delivery_id})
    return True
