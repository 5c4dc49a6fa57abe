"""The pause on the pages: the banner, the dashboard's pause and resume buttons."""

import getpass
from datetime import timedelta

from sqlalchemy import select

from outbox.models import AuditEvent, utcnow
from outbox.models.db import db
from outbox.ops import pause
from tests.support.pages import as_role, csrf, htmx, parse


def test_the_dashboard_offers_pause_and_the_banner_says_who_when_and_why(signed_in):
    page = parse(signed_in.get("/"))
    assert page.find_all("p", id="paused") == []
    form = page.find("form", id="pause-form")
    assert form["action"] == form["hx-post"] == "/pause" and form["hx-target"] == "#live"
    assert form["hx-confirm"].startswith("Pause sending?")
    assert form["hx-vals"] == '{"confirmed": "yes"}' and form["hx-preserve"] == "true"
    assert form.find("input", name="reason")["maxlength"] == "500"

    pause.pause("ann@example.com", "relay <maintenance>", now=utcnow() - timedelta(minutes=3))
    for path in ("/", "/messages"):
        banner = parse(signed_in.get(path)).find("p", id="paused")
        assert banner.text.startswith(
            "Sending is paused by ann@example.com 3 min ago: relay <maintenance>."
        ), banner.text
        moment = banner.find("time")
        assert moment["title"].endswith(" UTC") and moment["datetime"].endswith("Z")
    live = parse(signed_in.get("/", headers=htmx(signed_in)))  # the refresh keeps it current
    assert live.find("p", id="paused") and live.find_all("form", id="pause-form") == []
    resume = live.find("form", id="resume-form")
    assert resume["hx-post"] == "/resume" and resume["hx-confirm"].startswith("Resume sending?")


def test_pause_and_resume_from_htmx_answer_the_live_part(signed_in, staff):
    headers = htmx(signed_in)
    paused = signed_in.post("/pause", data={"reason": "relay down", "confirmed": "yes"},
                            headers=headers)  # fmt: skip
    assert paused.status_code == 200 and "HX-Request" in paused.vary
    part = parse(paused)
    assert part.find_all("h1") == [] and part.find("form", id="resume-form")
    assert "by staff@example.com" in part.find("p", id="paused").text
    found = pause.current()
    assert found is not None and (found.paused_by, found.reason) == (staff.email, "relay down")
    resumed = signed_in.post("/resume", data={"confirmed": "yes"}, headers=headers)
    assert resumed.status_code == 200 and parse(resumed).find("form", id="pause-form")
    assert pause.current() is None


def test_without_javascript_pause_asks_on_a_page_then_goes_back_to_the_dashboard(signed_in):
    token = csrf(signed_in, "/")
    asked = signed_in.post("/pause", data={"csrf_token": token, "reason": "relay down"})
    assert asked.status_code == 200 and pause.current() is None  # asked, nothing changed
    form = parse(asked).find("form", class_="confirm")
    fields = {i["name"]: i["value"] for i in form.find_all("input")}
    # the page signs its own token (its timestamp may be a second later than ours)
    assert set(fields) == {"csrf_token", "confirmed", "reason"} and fields["csrf_token"]
    assert (fields["confirmed"], fields["reason"]) == ("yes", "relay down")
    assert form["action"] == "/pause"
    done = signed_in.post("/pause", data=fields)
    assert (done.status_code, done.headers["Location"]) == (302, "/")
    assert pause.current() is not None and pause.current().reason == "relay down"
    resumed = signed_in.post("/resume", data={"csrf_token": token, "confirmed": "yes"})
    assert resumed.status_code == 302 and pause.current() is None


def test_pause_needs_a_csrf_token_and_a_signed_in_user(signed_in, client):
    assert signed_in.post("/pause", data={"confirmed": "yes"}).status_code == 400
    assert signed_in.post("/resume", data={"confirmed": "yes"}).status_code == 400
    token = csrf(client, "/sign-in")
    anonymous = client.post("/pause", data={"csrf_token": token, "confirmed": "yes"})
    assert anonymous.status_code == 302 and "/sign-in" in anonymous.headers["Location"]
    assert pause.current() is None


def test_only_an_admin_may_pause_and_resume_and_each_leaves_an_audit_row(app, staff, runner):
    for role in ("viewer", "sender"):
        client = as_role(app, staff, role)
        page = parse(client.get("/"))
        assert page.find_all("form", class_="pause-control") == []
        token = csrf(client, "/")
        for path in ("/pause", "/resume"):
            refused = client.post(path, data={"csrf_token": token, "confirmed": "yes"})
            assert refused.status_code == 403, (role, path)
        assert pause.current() is None
    admin = as_role(app, staff, "admin")
    token = csrf(admin, "/")
    assert admin.post("/pause", data={"csrf_token": token, "confirmed": "yes",
                                      "reason": "relay down"}).status_code == 302  # fmt: skip
    assert admin.post("/pause", data={"csrf_token": token, "confirmed": "yes"}).status_code == 302
    assert runner.invoke(args=["resume"]).exit_code == 0
    assert runner.invoke(args=["resume"]).exit_code == 0  # not paused: nothing to record
    rows = db.session.execute(select(AuditEvent.actor, AuditEvent.action, AuditEvent.detail)
                              .order_by(AuditEvent.id)).all()  # fmt: skip
    assert [tuple(r) for r in rows] == [
        ("staff@example.com", "pause", "relay down"),  # the second pause changed nothing
        (f"cli:{getpass.getuser()}", "resume", None),
    ]
