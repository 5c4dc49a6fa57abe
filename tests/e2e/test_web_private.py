"""What the pages keep private: where a form may send the browser on, what caches may
keep, what the session cookie tells of the password, and who may read the SQLite file."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from flask import Flask

from outbox.auth import accounts, tokens
from outbox.capabilities.webhooks import endpoints
from tests.support.pages import csrf

ELSEWHERE = ["https://evil.example/", "//evil.example/", "/\\evil.example/", "/\\/evil.example",
             "/\t/evil.example", "javascript:alert(1)", "evil.example"]  # fmt: skip


@pytest.fixture
def endpoint_id(app: Flask) -> int:
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    endpoint, _ = endpoints.add("http://127.0.0.1:9/hook")
    return endpoint.id


@pytest.mark.parametrize("switch", ["enable", "disable"])
@pytest.mark.parametrize("target", ELSEWHERE)
def test_the_webhook_switches_go_on_only_within_the_site(signed_in, endpoint_id, switch, target):
    token = csrf(signed_in, "/admin/webhooks")
    answer = signed_in.post(f"/admin/webhooks/{endpoint_id}/{switch}",
                            data={"csrf_token": token, "next": target})  # fmt: skip
    assert answer.status_code == 302 and answer.headers["Location"] == "/admin/webhooks"


def test_a_webhook_switch_goes_back_to_the_page_it_was_on(signed_in, endpoint_id):
    token = csrf(signed_in, "/admin/webhooks")
    back = f"/admin/webhooks/{endpoint_id}?before=5"
    answer = signed_in.post(f"/admin/webhooks/{endpoint_id}/disable",
                            data={"csrf_token": token, "next": back})  # fmt: skip
    assert answer.headers["Location"] == back


def test_signed_in_pages_and_api_answers_are_kept_out_of_caches(app, client, signed_in):
    app.config["WEBHOOK_ALLOW_PRIVATE"] = True
    for path in ("/", "/messages", "/admin/webhooks", "/admin/accounts"):
        answer = signed_in.get(path)
        assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store", path
    token = csrf(signed_in, "/admin/webhooks")
    made = signed_in.post("/admin/webhooks", data={"csrf_token": token,
                          "url": "http://127.0.0.1:9/hook"})  # fmt: skip
    assert "whsec_" in made.get_data(as_text=True)
    assert made.headers["Cache-Control"] == "no-store"
    api = {"Authorization": f"Bearer {tokens.create('shop')}"}
    made = client.post("/api/webhooks", json={"url": "http://127.0.0.1:9/other"}, headers=api)
    assert made.status_code == 201 and made.get_json()["secret"].startswith("whsec_")
    assert made.headers["Cache-Control"] == "no-store"
    assert "no-store" not in client.get("/static/outbox.css").headers.get("Cache-Control", "")


def test_the_session_cookie_tells_nothing_of_the_password_hash(app, client, staff):
    token = csrf(client, "/sign-in")
    client.post("/sign-in", data={"csrf_token": token, "email": "staff@example.com",
                                  "password": "correct horse"})  # fmt: skip
    cookie = client.get_cookie("session")
    assert cookie is not None
    serializer = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]
    session = serializer.loads(cookie.value)
    salt_and_hash = staff.password_hash.split("$", 1)[1]
    pieces = {salt_and_hash[i : i + 8] for i in range(len(salt_and_hash) - 7)}
    assert not any(piece in str(session) for piece in pieces), session
    # Still revocable: a new password ends the session.
    assert client.get("/").status_code == 200
    accounts.set_password("staff@example.com", "another horse battery")
    assert client.get("/").status_code == 302


def test_the_sqlite_file_a_migration_creates_is_for_its_owner_only(tmp_path: Path):
    database = tmp_path / "outbox.sqlite3"
    env = dict(os.environ, OUTBOX_DATABASE_URL=f"sqlite:///{database}",
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_SECRET_KEY="test")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "outbox", "db", "upgrade"], env=env,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.umask(0o022))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
