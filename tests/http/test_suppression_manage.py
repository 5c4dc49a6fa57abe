"""The suppression list by hand: the API, the CLI, CSV out and in, the page and its roles."""

import csv
import io
from datetime import timedelta

import pytest
import sqlalchemy as sa

from outbox.auth import tokens
from outbox.capabilities import suppression
from outbox.models import AuditEvent, Suppression, utcnow
from outbox.models.db import db
from tests.support.pages import as_role, csrf, parse

A, B = "a@example.com", "b@example.com"


def entries() -> list[tuple[str, str, str]]:
    db.session.expire_all()
    rows = db.session.scalars(sa.select(Suppression).order_by(Suppression.id))
    return [(e.address, e.reason, e.source) for e in rows]


def trail() -> list[tuple[str, str]]:
    stmt = sa.select(AuditEvent.actor, AuditEvent.action).order_by(AuditEvent.id)
    return [tuple(row) for row in db.session.execute(stmt) if "suppress" in row.action]


@pytest.fixture
def api(app, client):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {tokens.create('crm', ['read', 'manage'])}"}

    def call(method: str, path: str, **kwargs):  # type: ignore[no-untyped-def]
        return client.open(f"/api{path}", method=method, headers=headers, **kwargs)

    return call


@pytest.mark.all_databases
def test_the_api_adds_lists_pages_and_removes(app, api):
    later = (utcnow() + timedelta(days=3)).replace(microsecond=0)
    made = api(
        "POST",
        "/suppressions",
        json={
            "address": "Ann@Example.COM",
            "reason": "asked",
            "expires_at": later.isoformat() + "Z",
        },
    )
    assert made.status_code == 201, made.json
    assert made.json["address"] == "Ann@example.com" and made.json["key"] == "Ann@example.com"
    assert made.json["expires_at"] == later.isoformat() + "Z" and made.json["live"]
    assert made.json["source"] == "manual" and made.json["created_by"] == "token:crm"
    again = api("POST", "/suppressions", json={"address": "Ann@example.com", "reason": "other"})
    assert (again.status_code, again.json["id"], again.json["reason"]) == (
        200,
        made.json["id"],
        "asked",
    )
    for n in range(3):
        api("POST", "/suppressions", json={"address": f"user{n}@example.com", "reason": "x"})
    page = api("GET", "/suppressions?limit=2")
    assert [e["address"] for e in page.json["suppressions"]] == [
        "user2@example.com",
        "user1@example.com",
    ]
    rest = api("GET", page.json["next"].removeprefix("/api"))
    assert [e["address"] for e in rest.json["suppressions"]] == [
        "user0@example.com",
        "Ann@example.com",
    ]
    assert rest.json["next"] is None
    found = api("GET", "/suppressions?q=ANN@")
    assert [e["address"] for e in found.json["suppressions"]] == ["Ann@example.com"]
    assert api("DELETE", "/suppressions/ann@example.com").status_code == 404  # exact local part
    assert api("DELETE", "/suppressions/Ann@EXAMPLE.com").status_code == 204
    assert api("DELETE", "/suppressions/Ann@example.com").status_code == 404
    # An address that starts with "/" is answered as such, never redirected elsewhere.
    assert api("DELETE", "/suppressions/%2Fann@example.com").status_code == 404
    assert api("DELETE", "/suppressions/%2Fmessages%20%3Ce9%40x.org%3E").status_code == 404
    actions = [action for _, action in trail()]
    assert actions == ["suppress"] * 4 + ["unsuppress"]


def test_the_api_names_each_bad_field_and_stores_nothing(app, api):
    bad = api(
        "POST",
        "/suppressions",
        json={
            "address": "not an address",
            "reason": "",
            "expires_at": "2001-01-01T00:00:00Z",
            "x": 1,
        },
    )
    assert bad.status_code == 422
    assert set(bad.json["errors"]) == {"address", "reason", "expires_at", "x"}
    assert (
        "past" in bad.json["errors"]["expires_at"] or "future" in bad.json["errors"]["expires_at"]
    )
    assert api("POST", "/suppressions", data="x").status_code == 400
    assert api("GET", "/suppressions?limit=0").status_code == 422
    assert api("GET", "/suppressions?q=%00").status_code == 422
    assert entries() == []


def test_the_api_needs_the_manage_scope_to_change_the_list(app, client):
    reader = {"Authorization": f"Bearer {tokens.create('reader', ['read', 'send'])}"}
    refused = client.post("/api/suppressions", json={"address": A, "reason": "x"}, headers=reader)
    assert refused.status_code == 403
    assert client.delete(f"/api/suppressions/{A}", headers=reader).status_code == 403
    assert client.get("/api/suppressions", headers=reader).status_code == 200


def test_the_cli_suppresses_unsuppresses_and_round_trips_csv(app, runner, tmp_path):
    done = runner.invoke(args=["suppress", A, "--reason", "asked by phone", "--expires", "30"])
    assert done.exit_code == 0, done.output
    assert "suppressed a@example.com until" in done.output
    assert runner.invoke(args=["suppress", B, "--reason", "=HYPERLINK(1)"]).exit_code == 0
    assert "was on the list already" in runner.invoke(args=["suppress", A, "--reason", "x"]).output
    bad = runner.invoke(args=["suppress", "nobody", "--reason", "x"])
    assert bad.exit_code != 0 and "not an email address" in bad.output
    out = tmp_path / "list.csv"
    assert runner.invoke(args=["suppressions", "export", str(out)]).exit_code == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
    assert [(r["address"], r["reason"], r["source"]) for r in rows] == [
        (A, "asked by phone", "manual"),
        (B, "'=HYPERLINK(1)", "manual"),
    ]
    assert rows[0]["expires_at"].endswith("Z") and rows[1]["expires_at"] == ""
    assert runner.invoke(args=["unsuppress", A]).exit_code == 0
    missing = runner.invoke(args=["unsuppress", A])
    assert missing.exit_code != 0 and "not on the suppression list" in missing.output
    suppression.remove(B)
    db.session.commit()
    imported = runner.invoke(args=["suppressions", "import", str(out)])
    assert imported.exit_code == 0, imported.output
    assert "imported 2 addresses; 0 were on the list already" in imported.output
    assert entries() == [(A, "asked by phone", "import"), (B, "=HYPERLINK(1)", "import")]
    stdout = runner.invoke(args=["suppressions", "export"])
    assert stdout.output.splitlines()[0].startswith("address,reason,source,created_at")
    actors = {actor for actor, _ in trail()}
    assert len(actors) == 1 and actors.pop().startswith("cli:")


def test_an_import_with_a_bad_line_names_it_and_imports_nothing(app, runner, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(
        "address,reason,expires_at\r\na@example.com,ok,\r\nnot-an-address,x,\r\n"
        "c@example.com,ok,yesterday\r\nd@example.com,ok,2001-01-01T00:00:00Z\r\n"
    )
    result = runner.invoke(args=["suppressions", "import", str(path)])
    assert result.exit_code != 0
    assert "line 3:" in result.output and "line 4:" in result.output and "line 5:" in result.output
    assert "line 2" not in result.output
    assert entries() == []
    headless = tmp_path / "headless.csv"
    headless.write_text("a@example.com,ok\r\n")
    assert "header" in runner.invoke(args=["suppressions", "import", str(headless)]).output


def test_the_page_lists_searches_adds_and_removes_with_a_confirmation(app, staff):
    sender = as_role(app, staff, "sender")
    token = csrf(sender, "/suppressions")
    added = sender.post(
        "/suppressions",
        data={"csrf_token": token, "address": A, "reason": "complaint", "days": "7"},
    )
    assert added.status_code == 302
    bad = sender.post("/suppressions", data={"csrf_token": token, "address": "x", "reason": "r"})
    assert bad.status_code == 422 and "not an email address" in bad.get_data(as_text=True)
    no_reason = sender.post("/suppressions", data={"csrf_token": token, "address": B})
    assert no_reason.status_code == 422 and "give a reason" in no_reason.get_data(as_text=True)
    page = parse(sender.get("/suppressions?q=A@EXAMPLE"))
    (row,) = page.find_all("tr", id=f"suppression-{suppression.find(A).id}")
    assert "complaint" in row.text and "manual" in row.text
    asked = sender.post("/suppressions/remove", data={"csrf_token": token, "address": A})
    assert asked.status_code == 200 and "Remove a@example.com" in asked.get_data(as_text=True)
    assert entries() == [(A, "complaint", "manual")]
    gone = sender.post(
        "/suppressions/remove", data={"csrf_token": token, "address": A, "confirmed": "yes"}
    )
    assert gone.status_code == 302 and entries() == []
    assert [a for _, a in trail()] == ["suppress", "unsuppress"]


def test_a_viewer_reads_and_exports_a_sender_cannot_import(app, staff):
    suppression.add(A, "asked", "manual")
    db.session.commit()
    viewer = as_role(app, staff, "viewer")
    page = viewer.get("/suppressions").get_data(as_text=True)
    assert A in page and "/suppressions/remove" not in page and "Suppress an address" not in page
    token = csrf(viewer, "/suppressions")
    assert (
        viewer.post(
            "/suppressions", data={"csrf_token": token, "address": B, "reason": "x"}
        ).status_code
        == 403
    )
    assert (
        viewer.post(
            "/suppressions/remove", data={"csrf_token": token, "address": A, "confirmed": "yes"}
        ).status_code
        == 403
    )
    exported = viewer.get("/suppressions/export.csv")
    assert exported.mimetype == "text/csv" and A in exported.get_data(as_text=True)
    sender = as_role(app, staff, "sender")
    upload = {
        "csrf_token": csrf(sender, "/suppressions"),
        "file": (io.BytesIO(b"address,reason\r\nb@example.com,x\r\n"), "list.csv"),
    }
    assert "Import from CSV" not in sender.get("/suppressions").get_data(as_text=True)
    assert sender.post("/suppressions/import", data=upload).status_code == 403
    assert entries() == [(A, "asked", "manual")]


def test_an_admin_imports_on_the_page_and_bad_lines_are_named(app, staff):
    admin = as_role(app, staff, "admin")
    token = csrf(admin, "/suppressions")
    bad = {
        "csrf_token": token,
        "file": (io.BytesIO(b"address,reason\r\nok@example.com,x\r\nnope,x\r\n"), "list.csv"),
    }
    answer = admin.post("/suppressions/import", data=bad)
    assert answer.status_code == 422 and "line 3:" in answer.get_data(as_text=True)
    assert entries() == []
    good = {
        "csrf_token": token,
        "file": (
            io.BytesIO("\ufeffaddress,reason\r\nkunde@bücher.example,x\r\n".encode()),
            "list.csv",
        ),
    }
    assert admin.post("/suppressions/import", data=good).status_code == 302
    assert suppression.matching(["kunde@xn--bcher-kva.example"])


def test_the_message_page_reads_a_suppressed_recipient_with_its_reason_and_a_link(
    app, staff, make_message
):
    suppression.add(B, "complaint", "manual")
    db.session.commit()
    message = make_message(to=[A, B])
    page = as_role(app, staff, "viewer").get(f"/messages/{message.id}")
    rows = parse(page).find("table", **{"class": "list recipients"}).find_all("tr")
    (row,) = [r for r in rows if B in r.text]
    assert "suppressed" in row.text and "complaint" in row.text
    assert row.find("a")["href"] == "/suppressions?q=b@example.com"


def test_reject_mode_on_the_compose_page_answers_422_naming_the_address(app, staff):
    app.config["SUPPRESSED"] = "reject"
    suppression.add(B, "complaint", "manual")
    db.session.commit()
    sender = as_role(app, staff, "sender")
    form = {
        "csrf_token": csrf(sender),
        "sender": "shop@example.com",
        "to": B,
        "subject": "x",
        "text": "x",
    }
    answer = sender.post("/messages/new", data=form)
    assert answer.status_code == 422
    assert "b@example.com is on the suppression list (manual): complaint" in answer.get_data(
        as_text=True
    )
