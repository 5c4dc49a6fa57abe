"""The audit trail: the rows a page, the API and the CLI write, and the pages that list them."""

import getpass
import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from outbox.auth import audit, tokens
from outbox.core.status import Status
from outbox.models import AuditEvent, utcnow
from outbox.models.db import db
from tests.support.api import VALID
from tests.support.pages import csrf, move_to, sign_in_form


def trail() -> list[tuple]:
    db.session.expire_all()
    rows = db.session.execute(select(AuditEvent).order_by(AuditEvent.id)).scalars()
    return [(e.actor, e.action, e.message_pk, e.remote_addr) for e in rows]


@pytest.mark.all_databases
def test_a_page_an_api_and_a_cli_action_each_leave_their_row(app, signed_in, runner, make_message):
    failed = move_to(make_message(subject="failed"), Status.FAILED)
    queued = move_to(make_message(subject="queued"), Status.QUEUED)
    token = csrf(signed_in, "/")
    moved = signed_in.post(f"/messages/{failed}/resend", data={"csrf_token": token})
    assert moved.status_code == 302
    made = runner.invoke(args=["create-token", "shop", "--scope", "manage", "--scope", "send"])
    assert made.exit_code == 0, made.output
    bearer = {"Authorization": f"Bearer {made.output.splitlines()[-1]}"}
    client = app.test_client()
    assert client.post(f"/api/messages/{queued}/cancel", headers=bearer).status_code == 200
    assert client.post("/api/messages", json=VALID, headers=bearer).status_code == 201
    refused = client.post(f"/api/messages/{failed}/resend", headers=bearer)  # sent already: 409
    assert refused.status_code == 409
    assert trail() == [
        ("staff@example.com", "resend", failed, "127.0.0.1"),
        (f"cli:{getpass.getuser()}", "create_token", None, None),
        ("token:shop", "cancel", queued, "127.0.0.1"),
    ]  # an API enqueue is not audited: its row records its source and time
    made_token = select(AuditEvent.detail).where(AuditEvent.action == "create_token")
    detail = db.session.execute(made_token)
    assert json.loads(detail.scalar_one()) == {"name": "shop", "scopes": "send manage"}


def test_bulk_compose_send_again_and_resend_all_are_recorded(signed_in, make_message):
    sent = move_to(make_message(subject="sent"), Status.SENT)
    failed = move_to(make_message(subject="failed"), Status.FAILED)
    token = csrf(signed_in, "/")
    signed_in.post(f"/messages/{sent}/send-again", data={"csrf_token": token, "confirmed": "yes"})
    signed_in.post("/messages/bulk", data={"csrf_token": token, "ids": [failed], "move": "cancel",
                                           "confirmed": "yes"})  # fmt: skip
    signed_in.post("/messages/new", data={"csrf_token": token, "to": "a@example.com",
                                          "subject": "hi", "text": "hi"})  # fmt: skip
    signed_in.post("/messages/resend-failed", data={"csrf_token": token, "confirm": "y"})
    actions = [action for _, action, _, _ in trail()]
    assert actions == ["send_again", "bulk_cancel", "compose", "resend_all"], actions


@pytest.mark.all_databases
def test_the_admin_list_pages_newest_first_and_filters(app, signed_in, make_message):
    message = make_message()
    with app.test_request_context():
        for n in range(audit.PAGE + 5):
            audit.record("cancel" if n % 2 else "resend", message.id if n % 3 == 0 else None,
                         f"n={n}")  # fmt: skip
    first = signed_in.get("/admin/audit").data.decode()
    assert first.index(">n=54<") < first.index(">n=53<") and ">n=4<" not in first
    older = signed_in.get("/admin/audit?before=" + str(_oldest_shown(first)))
    assert ">n=4<" in older.data.decode() and ">n=54<" not in older.data.decode()
    cancels = signed_in.get("/admin/audit?action=cancel").data.decode()
    assert ">n=53<" in cancels and ">n=54<" not in cancels
    mine = signed_in.get(f"/admin/audit?message={message.id}").data.decode()
    assert ">n=54<" in mine and ">n=53<" not in mine and ">n=51<" in mine
    shown = signed_in.get(f"/messages/{message.id}").data.decode()
    assert "Audit trail" in shown and ">n=54<" in shown and ">n=53<" not in shown
    assert signed_in.get("/admin/audit?message=x").status_code == 400


def _oldest_shown(page: str) -> int:
    ids = db.session.execute(select(AuditEvent.id).order_by(AuditEvent.id.desc())).scalars().all()
    return ids[audit.PAGE - 1]


def test_account_and_token_changes_are_recorded_from_the_cli(runner, app):
    runner.invoke(args=["create-user", "a@example.com", "--password", "longenough"])
    runner.invoke(args=["set-password", "a@example.com", "--password", "otherlonger"])
    tokens.create("t")
    runner.invoke(args=["revoke-token", "t"])
    actions = [action for _, action, _, _ in trail()]
    assert actions == ["create_user", "set_password", "create_token", "revoke_token"]


def test_signing_in_and_out_is_recorded_and_a_wrong_password_is_not(client, staff):
    refused = client.post("/sign-in", data=sign_in_form(client, password="wrong horse"))
    assert refused.status_code == 401 and trail() == []  # failures are counted, not trailed
    assert client.post("/sign-in", data=sign_in_form(client)).status_code == 302
    assert client.post("/sign-out", data={"csrf_token": csrf(client, "/")}).status_code == 302
    assert [(actor, action) for actor, action, _, addr in trail()] == [
        (staff.email, "sign_in"), (staff.email, "sign_out")]  # fmt: skip
    assert {addr for *_, addr in trail()} == {"127.0.0.1"}


@pytest.mark.all_databases
def test_the_purge_removes_events_past_their_retention_and_counts_them_first(app, runner):
    now = utcnow()
    for days in (400, 366, 364, 1):
        db.session.add(AuditEvent(at=now - timedelta(days=days), actor="cli:x", action="pause"))
    db.session.commit()
    dry = runner.invoke(args=["purge", "--dry-run"])
    assert "; 2 audit events removed" in dry.output and len(trail()) == 4
    done = runner.invoke(args=["purge"])
    assert done.exit_code == 0 and "; 2 audit events removed" in done.output, done.output
    kept = db.session.scalars(select(AuditEvent.at).order_by(AuditEvent.id)).all()
    assert [round((now - at).days) for at in kept[:2]] == [364, 1]  # the two younger stay
    assert [action for _, action, _, _ in trail()][-1] == "purge"  # and the purge says so
    app.config["AUDIT_RETENTION_DAYS"] = 0  # keeps the trail for good
    db.session.add(AuditEvent(at=now - timedelta(days=4000), actor="cli:x", action="pause"))
    db.session.commit()
    assert "audit events" not in runner.invoke(args=["purge"]).output
    assert len(trail()) == 4
