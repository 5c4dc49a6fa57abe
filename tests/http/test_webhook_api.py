"""Webhook endpoints over the API: the manage scope, the secret once, errors by name."""

import pytest
from sqlalchemy import select

from outbox.auth import tokens
from outbox.capabilities.webhooks import events
from outbox.models import AuditEvent, WebhookEndpoint
from outbox.models.db import db
from tests.support.receiver import Receiver


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def manager(app) -> dict[str, str]:
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    return auth(tokens.create("shop", ["manage"]))


def test_register_list_and_remove_an_endpoint(client, manager):
    receiver = Receiver()  # never started: registering sends nothing
    asked = {"url": receiver.url, "events": ["message.failed", "message.sent"]}
    made = client.post("/api/webhooks", headers=manager, json=asked)
    assert made.status_code == 201, made.json
    body = made.json
    assert body["secret"].startswith("whsec_")
    assert body["events"] == ["message.sent", "message.failed"]  # in the kinds' order
    assert (body["url"], body["enabled"], body["created_by"]) == (receiver.url, True, "token:shop")
    assert made.headers["Location"] == f"/api/webhooks/{body['id']}"
    listed = client.get("/api/webhooks", headers=manager).json["webhooks"]
    assert [e["id"] for e in listed] == [body["id"]] and "secret" not in listed[0]
    one = client.get(made.headers["Location"], headers=manager)
    assert one.json == listed[0]
    assert client.delete(f"/api/webhooks/{body['id']}", headers=manager).status_code == 204
    gone = client.delete(f"/api/webhooks/{body['id']}", headers=manager)
    assert gone.status_code == 404 and gone.json["error"] == f"no webhook endpoint {body['id']}"
    trail = select(AuditEvent.actor, AuditEvent.action).where(AuditEvent.action.like("webhook%"))
    assert db.session.execute(trail.order_by(AuditEvent.id)).all() == [
        ("token:shop", "webhook_add"), ("token:shop", "webhook_remove")]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [({"url": "ftp://example.com/"}, "url", "only http and https"),
     ({"url": "http://127.0.0.1/", "events": ["message.lost"]}, "events", "unknown event kind"),
     ({"url": "http://127.0.0.1/", "secret": "mine"}, "secret", "not a field"),
     ({"events": []}, "url", "is required"),
     ({"url": "http://127.0.0.1/", "events": "message.sent"}, "events", "a list")],
)  # fmt: skip
def test_bad_fields_are_422_naming_each_and_nothing_is_stored(client, manager, body, field, text):
    refused = client.post("/api/webhooks", headers=manager, json=body)
    assert refused.status_code == 422
    assert text in refused.json["errors"][field]
    assert db.session.scalars(select(WebhookEndpoint)).all() == []


def test_a_private_address_is_refused_without_the_opt_out(app, client, manager):
    app.config["WEBHOOK_ALLOW_PRIVATE"] = False
    refused = client.post("/api/webhooks", headers=manager, json={"url": "http://10.1.1.1/x"})
    assert refused.status_code == 422
    assert "10.1.1.1 is a private, loopback" in refused.json["errors"]["url"]


def test_a_body_that_is_not_a_json_object_is_400(client, manager):
    assert client.post("/api/webhooks", headers=manager, data="url=x").status_code == 400
    assert client.post("/api/webhooks", headers=manager, json=["x"]).status_code == 400


def test_every_webhook_route_needs_the_manage_scope(client, app):
    reader = auth(tokens.create("reader", ["read", "send"]))
    for method, path in (("get", "/api/webhooks"), ("post", "/api/webhooks"),
                         ("get", "/api/webhooks/1"), ("delete", "/api/webhooks/1"),
                         ("post", "/api/webhooks/1/enable"), ("post", "/api/webhooks/1/disable"),
                         ("get", "/api/webhooks/1/deliveries")):  # fmt: skip
        answer = getattr(client, method)(path, headers=reader, json={"url": "http://x/"})
        assert answer.status_code == 403 and answer.json["scope"] == "manage", path
    assert client.get("/api/messages", headers=reader).status_code == 200  # GETs stay "read"


def test_disable_enable_and_read_an_endpoints_deliveries_a_page_at_a_time(client, manager):
    made = client.post("/api/webhooks", headers=manager, json={"url": "http://127.0.0.1:9/"})
    endpoint_id = made.json["id"]
    off = client.post(f"/api/webhooks/{endpoint_id}/disable", headers=manager)
    assert off.status_code == 200 and off.json["enabled"] is False
    assert off.json["disabled_reason"] == "disabled by token:shop"
    on = client.post(f"/api/webhooks/{endpoint_id}/enable", headers=manager)
    assert on.json["enabled"] is True and on.json["disabled_at"] is None
    events.emit_many([events.Event(events.SENT, n, f"<{n}@x>") for n in range(55)])
    db.session.commit()
    first = client.get(f"/api/webhooks/{endpoint_id}/deliveries", headers=manager).json
    assert len(first["deliveries"]) == 50
    newest = first["deliveries"][0]
    assert (newest["type"], newest["status"], newest["attempts"]) == ("message.sent", "pending", 0)
    assert newest["payload"]["data"]["message_id"] == "<54@x>"
    second = client.get(first["next"], headers=manager).json
    assert len(second["deliveries"]) == 5 and second["next"] is None
    assert second["deliveries"][-1]["payload"]["data"]["id"] == 0
    bad = client.get(f"/api/webhooks/{endpoint_id}/deliveries?before=x&limit=3", headers=manager)
    assert bad.status_code == 422 and set(bad.json["errors"]) == {"before", "limit"}
    assert client.get("/api/webhooks/999/deliveries", headers=manager).status_code == 404
    trail = select(AuditEvent.action).where(AuditEvent.action.like("webhook%"))
    assert db.session.scalars(trail.order_by(AuditEvent.id)).all() == [
        "webhook_add", "webhook_disable", "webhook_enable"]  # fmt: skip
