"""API token scopes: each request needs its scope; existing and default tokens have all."""

import pytest
from sqlalchemy import select

from outbox.auth import tokens
from outbox.models import ApiToken
from outbox.models.db import db
from tests.support.api import VALID


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.all_databases
def test_each_request_needs_its_scope_and_the_403_names_it(client, app):
    everything = tokens.create("all")
    sender = tokens.create("sender", ["send"])
    reader = tokens.create("reader", ["read"])
    manager = tokens.create("manager", ["manage", "read"])
    made = client.post("/api/messages", json=VALID, headers=auth(sender))
    assert made.status_code == 201, made.get_json()
    pk = made.get_json()["id"]
    for token, method, path, scope in [
        (reader, "post", "/api/messages", "send"),
        (reader, "post", "/api/messages/batch", "send"),
        (sender, "get", f"/api/messages/{pk}", "read"),
        (sender, "get", "/api/messages", "read"),
        (reader, "post", f"/api/messages/{pk}/cancel", "manage"),
        (sender, "post", f"/api/messages/{pk}/resend", "manage"),
        (manager, "post", "/api/messages", "send"),
    ]:
        answer = getattr(client, method)(path, json=VALID, headers=auth(token))
        assert answer.status_code == 403, (path, answer.status_code)
        assert answer.get_json() == {"error": f"this token lacks the {scope!r} scope",
                                     "scope": scope}  # fmt: skip
    assert client.get(f"/api/messages/{pk}", headers=auth(reader)).status_code == 200
    assert client.post(f"/api/messages/{pk}/cancel", headers=auth(manager)).status_code == 200
    assert client.post(f"/api/messages/{pk}/resend", headers=auth(everything)).status_code == 200
    stored = dict(db.session.execute(select(ApiToken.name, ApiToken.scopes)).all())
    assert stored == {"all": "send read manage", "sender": "send", "reader": "read",
                      "manager": "read manage"}  # fmt: skip


def test_create_token_takes_scopes_and_refuses_unknown_ones(runner, app, client):
    made = runner.invoke(args=["create-token", "shop", "--scope", "send", "--scope", "read"])
    assert made.exit_code == 0, made.output
    token = made.output.splitlines()[-1]
    assert client.get("/api/messages", headers=auth(token)).status_code == 200
    moved = client.post("/api/messages/1/cancel", headers=auth(token))
    assert moved.status_code == 403 and moved.get_json()["scope"] == "manage"
    bad = runner.invoke(args=["create-token", "other", "--scope", "everything"])
    assert bad.exit_code != 0 and "everything" in bad.output
    with pytest.raises(ValueError):
        tokens.create("other", [])
