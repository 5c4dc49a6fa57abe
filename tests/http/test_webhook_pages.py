"""The admins' webhook pages, the CLI and the disabled-endpoint banner (SQLite)."""

from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import select

from outbox.capabilities.webhooks import endpoints, events, run_due, store
from outbox.models import AuditEvent, WebhookDelivery, WebhookEndpoint
from outbox.models.db import db
from tests.support.pages import as_role, csrf, parse
from tests.support.receiver import Receiver


@pytest.fixture
def receiver(app: Flask) -> Iterator[Receiver]:
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    found = Receiver().start()
    yield found
    found.stop()


def audited() -> list[str]:
    return list(db.session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)))


def test_an_admin_adds_an_endpoint_sees_the_secret_once_and_a_test_event_arrives(
    app, staff, receiver
):
    client = as_role(app, staff, "admin")
    token = csrf(client, "/admin/webhooks")
    page = client.post("/admin/webhooks", data={"csrf_token": token, "url": receiver.url,
                                                "events": ["message.failed"]})  # fmt: skip
    assert page.status_code == 200
    secret = parse(page).find("code", id="new-secret").text
    assert secret.startswith("whsec_")
    again = client.get("/admin/webhooks").get_data(as_text=True)
    assert secret not in again and receiver.url in again  # shown once
    endpoint = db.session.scalars(select(WebhookEndpoint)).one()
    assert endpoint.events == "message.failed" and endpoint.created_by == "staff@example.com"
    receiver.secret = secret
    assert client.post(f"/admin/webhooks/{endpoint.id}/test",
                       data={"csrf_token": token}).status_code == 302  # fmt: skip
    run_due("w")
    [event] = receiver.events.values()
    assert event["type"] == "webhook.test"
    shown = client.get(f"/admin/webhooks/{endpoint.id}").get_data(as_text=True)
    assert "webhook.test" in shown and "HTTP 204" in shown and "Send again" in shown
    assert audited() == ["webhook_add", "webhook_test"]


def test_a_bad_url_is_refused_by_name_and_nothing_is_added(app, staff):
    client = as_role(app, staff, "admin")
    token = csrf(client, "/admin/webhooks")
    page = client.post("/admin/webhooks", data={"csrf_token": token, "url": "http://10.0.0.5/x"})
    assert page.status_code == 422
    assert "10.0.0.5 is a private, loopback" in page.get_data(as_text=True)
    assert 'value="http://10.0.0.5/x"' in page.get_data(as_text=True)
    assert db.session.scalars(select(WebhookEndpoint)).all() == []


def test_a_disabled_endpoint_shows_a_banner_to_admins_on_every_page_until_enabled(
    app, staff, receiver
):
    endpoint, _ = endpoints.add(receiver.url)
    store.disable(endpoint.id, "delivery 4 failed 9 times, lastly: HTTP 500")
    db.session.commit()
    admin = as_role(app, staff, "admin")
    for path in ("/", "/messages", "/admin/webhooks"):
        banner = parse(admin.get(path)).find("p", class_="webhooks-off")
        assert banner is not None and "failed 9 times" in banner.text, path
    viewer = as_role(app, staff, "viewer")
    assert parse(viewer.get("/")).find_all("p", class_="webhooks-off") == []
    admin = as_role(app, staff, "admin")
    token = csrf(admin, "/admin/webhooks")
    admin.post(f"/admin/webhooks/{endpoint.id}/enable", data={"csrf_token": token})
    assert parse(admin.get("/")).find_all("p", class_="webhooks-off") == []


def test_the_pages_are_for_admins_only_and_the_buttons_hidden_from_others(app, staff, receiver):
    endpoint, _ = endpoints.add(receiver.url)
    sender = as_role(app, staff, "sender")
    token = csrf(sender)
    assert "/admin/webhooks" not in sender.get("/").get_data(as_text=True)
    for path in ("/admin/webhooks", f"/admin/webhooks/{endpoint.id}"):
        assert sender.get(path).status_code == 403
    for path in ("", f"/{endpoint.id}/disable", f"/{endpoint.id}/delete", f"/{endpoint.id}/test"):
        assert sender.post(f"/admin/webhooks{path}", data={"csrf_token": token,
                           "url": receiver.url}).status_code == 403  # fmt: skip
    assert len(db.session.scalars(select(WebhookEndpoint)).all()) == 1


def test_remove_asks_first_then_removes_the_endpoint_and_its_deliveries(app, staff, receiver):
    endpoint, _ = endpoints.add(receiver.url)
    events.emit(events.SENT, message_pk=1, message_id="<1@x>")
    db.session.commit()
    client = as_role(app, staff, "admin")
    token = csrf(client, "/admin/webhooks")
    asked = client.post(f"/admin/webhooks/{endpoint.id}/delete", data={"csrf_token": token})
    assert asked.status_code == 200 and "Remove webhook endpoint" in asked.get_data(as_text=True)
    assert db.session.scalars(select(WebhookEndpoint)).all() != []
    client.post(f"/admin/webhooks/{endpoint.id}/delete",
                data={"csrf_token": token, "confirmed": "yes"})  # fmt: skip
    db.session.expire_all()
    assert db.session.scalars(select(WebhookEndpoint)).all() == []
    assert db.session.scalars(select(WebhookDelivery)).all() == []
    assert audited() == ["webhook_add", "webhook_remove"]


def test_cli_add_prints_the_secret_last_then_list_and_remove(app, runner, receiver):
    added = runner.invoke(args=["webhook", "add", receiver.url, "--events",
                                "message.sent,message.failed"])  # fmt: skip
    assert added.exit_code == 0, added.output
    secret = added.output.strip().splitlines()[-1]
    endpoint = db.session.scalars(select(WebhookEndpoint)).one()
    assert secret == endpoint.secret and secret.startswith("whsec_")
    assert endpoint.events == "message.sent message.failed"
    listed = runner.invoke(args=["webhook", "list"])
    assert f"{endpoint.id}\tenabled\t{receiver.url}\tmessage.sent message.failed" in listed.output
    assert secret not in listed.output
    wrong = runner.invoke(args=["webhook", "add", receiver.url, "--events", "message.lost"])
    assert wrong.exit_code == 1 and "unknown event kind 'message.lost'" in wrong.output
    assert runner.invoke(args=["webhook", "remove", str(endpoint.id)]).exit_code == 0
    gone = runner.invoke(args=["webhook", "remove", str(endpoint.id)])
    assert gone.exit_code == 1 and f"no webhook endpoint {endpoint.id}" in gone.output
    assert audited() == ["webhook_add", "webhook_remove"]


def test_cli_refuses_a_private_address_without_the_opt_out(app, runner):
    added = runner.invoke(args=["webhook", "add", "http://127.0.0.1:9/hooks"])
    assert added.exit_code == 1
    assert "127.0.0.1 is a private, loopback" in added.output
    assert "OUTBOX_WEBHOOK_ALLOW_PRIVATE=true" in added.output
