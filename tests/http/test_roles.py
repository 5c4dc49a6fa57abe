"""Staff roles and sessions: what each role may do and see, the admin pages, and sign-out."""

from datetime import datetime

import pytest
import sqlalchemy as sa
from flask_migrate import downgrade, upgrade
from sqlalchemy import func, select

from outbox import create_app
from outbox.auth import accounts
from outbox.core.status import Status
from outbox.models import ApiToken, Message, User
from outbox.models.db import db, dispose_engines
from tests.support.app import base_config
from tests.support.pages import as_role, csrf, move_to, parse

NOW = datetime(2030, 1, 10, 12, 0, 0)

# Every route that changes something, with the status its message needs ({id} filled in).
CHANGING = [
    ("/messages/{id}/resend", Status.FAILED),
    ("/messages/{id}/cancel", Status.QUEUED),
    ("/messages/{id}/send-now", Status.DEFERRED),
    ("/messages/{id}/send-again", Status.SENT),
    ("/failures/{id}/resend", Status.FAILED),
    ("/messages/resend-failed", Status.FAILED),
    ("/messages/bulk", Status.FAILED),
    ("/messages/new", Status.QUEUED),
    ("/admin/accounts", Status.QUEUED),
    ("/admin/accounts/role", Status.QUEUED),
    ("/admin/accounts/delete", Status.QUEUED),
    ("/admin/tokens", Status.QUEUED),
    ("/admin/tokens/revoke", Status.QUEUED),
]
ADMIN_ONLY = ["/messages/resend-failed", "/admin/accounts", "/admin/accounts/role",
              "/admin/accounts/delete", "/admin/tokens", "/admin/tokens/revoke"]  # fmt: skip
BUTTONS = {  # status -> the action URL of its button on the message page
    Status.FAILED: "/messages/{id}/resend",
    Status.DEFERRED: "/messages/{id}/send-now",
    Status.QUEUED: "/messages/{id}/cancel",
    Status.SENT: "/messages/{id}/send-again",
}


def snapshot() -> list[tuple]:
    db.session.expire_all()
    rows = db.session.execute(select(Message).order_by(Message.id)).scalars()
    users = db.session.execute(select(User.email, User.role).order_by(User.id)).all()
    return [(m.id, m.status, m.attempts) for m in rows] + [tuple(u) for u in users]


@pytest.fixture
def movable(make_message) -> dict[Status, int]:
    made = {s: make_message(subject=s.value) for s in (Status.QUEUED, Status.DEFERRED,
                                                        Status.SENT, Status.FAILED)}  # fmt: skip
    return {s: move_to(m, s) for s, m in made.items()}


def post_everything(client, movable, paths) -> dict[str, int]:
    token = csrf(client, "/")
    codes = {}
    for path, status in paths:
        url = path.format(id=movable[status])
        form = {"csrf_token": token, "confirmed": "yes", "confirm": "y",
                "ids": [movable[status]], "move": "resend", "email": "staff@example.com",
                "role": "viewer", "to": "a@example.com", "subject": "x", "text": "x",
                "password": "longenough"}  # fmt: skip
        codes[url] = client.post(url, data=form).status_code
    return codes


@pytest.mark.all_databases
def test_a_viewer_is_refused_every_change_and_sees_no_button(app, staff, movable):
    viewer = as_role(app, staff, "viewer")
    before = snapshot()
    codes = post_everything(viewer, movable, CHANGING)
    assert set(codes.values()) == {403}, codes
    assert snapshot() == before
    refused = viewer.post("/messages/new", data={"csrf_token": csrf(viewer, "/")})
    assert refused.status_code == 403 and b"Not allowed for your role" in refused.data
    for path in ("/messages/new", "/admin/accounts", "/admin/audit", "/admin/tokens"):
        assert viewer.get(path).status_code == 403, path
    pages = {s: viewer.get(f"/messages/{pk}").data.decode() for s, pk in movable.items()}
    for status, action in BUTTONS.items():
        assert action.format(id=movable[status]) not in pages[status]
    dashboard = viewer.get("/").data.decode()
    assert 'id="resend-all"' not in dashboard
    assert f'id="resend-{movable[Status.FAILED]}"' not in dashboard
    assert 'href="/messages/new"' not in dashboard and 'href="/admin/accounts"' not in dashboard
    assert 'class="bulk-bar"' not in viewer.get("/messages").data.decode()


def test_a_sender_sees_and_uses_the_buttons_but_not_the_admin_ones(app, staff, movable):
    sender = as_role(app, staff, "sender")
    pages = {s: sender.get(f"/messages/{pk}").data.decode() for s, pk in movable.items()}
    for status, action in BUTTONS.items():
        assert action.format(id=movable[status]) in pages[status]
    dashboard = sender.get("/").data.decode()
    assert f'id="resend-{movable[Status.FAILED]}"' in dashboard
    assert 'id="resend-all"' not in dashboard
    assert 'href="/messages/new"' in dashboard and 'href="/admin/audit"' not in dashboard
    assert 'class="bulk-bar"' in sender.get("/messages").data.decode()
    before = snapshot()
    admin_routes = [(p, Status.FAILED) for p in ADMIN_ONLY]
    assert set(post_everything(sender, movable, admin_routes).values()) == {403}
    assert snapshot() == before
    assert sender.get("/admin/audit").status_code == sender.get("/admin/tokens").status_code == 403
    token = csrf(sender, "/")
    moved = sender.post(f"/messages/{movable[Status.FAILED]}/resend", data={"csrf_token": token})
    assert moved.status_code == 302
    assert db.session.get(Message, movable[Status.FAILED]).status == Status.QUEUED.value


@pytest.mark.all_databases
def test_an_admin_manages_accounts_but_never_demotes_the_last_admin(app, staff):
    admin = as_role(app, staff, "admin")
    page = admin.get("/admin/accounts")
    assert page.status_code == 200 and b"staff@example.com" in page.data
    token = csrf(admin, "/admin/accounts")
    form = {"csrf_token": token, "email": "new@example.com", "password": "longenough",
            "role": "sender"}  # fmt: skip
    assert admin.post("/admin/accounts", data=form).status_code == 302
    assert accounts.find("new@example.com").role == "sender"
    demote = {"csrf_token": token, "email": "staff@example.com", "role": "viewer"}
    answer = admin.post("/admin/accounts/role", data=demote, follow_redirects=True)
    assert b"last admin" in answer.data
    assert accounts.find("staff@example.com").role == "admin"
    gone = {"csrf_token": token, "email": "staff@example.com"}
    assert b"last admin" in admin.post("/admin/accounts/delete", data=gone,
                                       follow_redirects=True).data  # fmt: skip
    promote = {"csrf_token": token, "email": "new@example.com", "role": "admin"}
    admin.post("/admin/accounts/role", data=promote)
    admin.post("/admin/accounts/role", data=demote)
    db.session.expire_all()
    assert accounts.find("staff@example.com").role == "viewer"
    assert admin.get("/admin/accounts").status_code == 403  # demoted: the next request knows
    count = db.session.execute(select(func.count()).select_from(User)).scalar_one()
    assert count == 2


def test_the_first_account_is_an_admin_and_later_ones_viewers_unless_named(runner, app):
    first = runner.invoke(args=["create-user", "a@example.com", "--password", "longenough"])
    later = runner.invoke(args=["create-user", "b@example.com", "--password", "longenough"])
    named = runner.invoke(args=["create-user", "c@example.com", "--password", "longenough",
                                "--role", "sender"])  # fmt: skip
    bad = runner.invoke(args=["create-user", "d@example.com", "--password", "longenough",
                              "--role", "boss"])  # fmt: skip
    assert first.exit_code == later.exit_code == named.exit_code == 0, first.output
    assert bad.exit_code != 0
    roles = [accounts.find(f"{n}@example.com").role for n in "abc"]
    assert roles == ["admin", "viewer", "sender"]


@pytest.mark.all_databases
def test_a_copied_session_cookie_dies_at_sign_out(app, staff):
    browser = app.test_client()
    token = csrf(browser, "/sign-in")
    signed = browser.post("/sign-in", data={"csrf_token": token, "email": "staff@example.com",
                                            "password": "correct horse"})  # fmt: skip
    assert signed.status_code == 302
    cookie = browser.get_cookie("session")
    thief = app.test_client()
    thief.set_cookie("session", cookie.value)
    assert thief.get("/").status_code == 200  # the copy works while the session lives
    out = browser.post("/sign-out", data={"csrf_token": csrf(browser, "/")})
    assert out.status_code == 302
    assert thief.get("/").status_code == 302
    assert thief.get("/messages").headers["Location"].startswith("/sign-in")
    again = app.test_client()  # signing in again works, with a new session
    token = csrf(again, "/sign-in")
    again.post("/sign-in", data={"csrf_token": token, "email": "staff@example.com",
                                 "password": "correct horse"})  # fmt: skip
    assert again.get("/").status_code == 200 and thief.get("/").status_code == 302


@pytest.mark.all_databases
def test_0011_keeps_what_existing_accounts_and_tokens_could_do(empty_database_url):
    app = create_app(base_config(empty_database_url))
    with app.app_context():
        try:
            upgrade(revision="0010")
            users = sa.table("users", *(sa.column(n) for n in ("email", "password_hash",
                                                                 "created_at")))  # fmt: skip
            old_tokens = sa.table("api_tokens", *(sa.column(n) for n in (
                "name", "token_hash", "created_at")))  # fmt: skip
            with db.engine.begin() as conn:
                conn.execute(users.insert().values(email="old@example.com", password_hash="x",
                                                   created_at=NOW))  # fmt: skip
                conn.execute(old_tokens.insert().values(name="shop", token_hash="a" * 64,
                                                        created_at=NOW))  # fmt: skip
            upgrade()
            user = db.session.execute(select(User)).scalar_one()
            assert (user.role, user.session_generation) == ("admin", 0)
            assert db.session.execute(select(ApiToken.scopes)).scalar_one() == "send read manage"
            db.session.remove()
            downgrade(revision="0010")
            columns = {c["name"] for c in sa.inspect(db.engine).get_columns("users")}
            assert (
                "role" not in columns
                and "audit_events" not in sa.inspect(db.engine).get_table_names()
            )
            upgrade()
        finally:
            db.session.remove()
            dispose_engines()


def test_an_admin_makes_and_revokes_tokens_on_the_tokens_page(app, staff):
    admin = as_role(app, staff, "admin")
    token = csrf(admin, "/admin/tokens")
    made = admin.post("/admin/tokens", data={"csrf_token": token, "name": "shop",
                                             "scope": ["read"]})  # fmt: skip
    assert made.status_code == 200
    secret = parse(made).find(id="new-token").text.strip()
    client = app.test_client()
    bearer = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/messages", headers=bearer).status_code == 200
    assert client.post("/api/messages", json={}, headers=bearer).status_code == 403
    assert "Set-Cookie" not in made.headers or secret not in made.headers["Set-Cookie"]
    again = admin.post("/admin/tokens", data={"csrf_token": token, "name": "shop", "scope": "send"})
    assert again.status_code == 422 and b"revoke it first" in again.data
    gone = admin.post("/admin/tokens/revoke", data={"csrf_token": token, "name": "shop"},
                      follow_redirects=True)  # fmt: skip
    assert b"Revoked shop." in gone.data
    assert client.get("/api/messages", headers=bearer).status_code == 401


def test_set_role_from_the_cli_keeps_the_last_admin(runner, app, staff):
    assert runner.invoke(args=["set-role", "staff@example.com", "viewer"]).exit_code != 0
    runner.invoke(args=["create-user", "b@example.com", "--password", "longenough"])
    done = runner.invoke(args=["set-role", "b@example.com", "admin"])
    assert done.exit_code == 0 and "b@example.com is now admin" in done.output
    assert runner.invoke(args=["set-role", "staff@example.com", "viewer"]).exit_code == 0
    assert accounts.find("staff@example.com").role == "viewer"


def test_allows_reads_actions_and_roles():
    from outbox.core.roles import ACTIONS, allows

    assert allows("admin", "admin") and allows("admin", "resend") and allows("sender", "viewer")
    assert not allows("sender", "admin") and not allows("viewer", "resend")
    assert not allows("viewer", "unknown") and not allows(None, "viewer") and not allows("x", "x")
    assert {a for a in ACTIONS if allows("sender", a)} == {
        "compose",
        "resend",
        "cancel",
        "send_now",
        "send_again",
        "bulk",
        "suppress",
    }
    assert not any(allows("viewer", a) for a in ACTIONS)
