"""The outbox list's filter through the pages: the grammar and the form's fields, a bad term
answered 400 on the page, chips, paging that keeps the filter, and bulk jobs asked for,
started (CSRF, roles) and shown."""

from urllib.parse import parse_qs, urlsplit

import pytest

from outbox.capabilities import bulk_jobs
from outbox.core.status import Status
from outbox.models import AuditEvent, BulkJob
from outbox.models.db import db
from outbox.ops import reports
from tests.support.pages import as_role, csrf, fresh, htmx, move_to, parse

ALLOWANCE = 3


@pytest.fixture
def make_in(make_message):
    def make(status: Status, error: str = "550 5.2.2 mailbox full", **fields) -> int:  # type: ignore[no-untyped-def]
        return move_to(make_message(**fields), status, error)

    return make


def listed(client, path: str) -> list[int]:  # type: ignore[no-untyped-def]
    page = parse(client.get(path))
    rows = page.find("tbody", id="rows")
    return sorted(int(urlsplit(a["href"]).path.rsplit("/", 1)[1]) for a in rows.find_all("a"))


def test_the_grammar_and_the_forms_fields_filter_the_list_alike(signed_in, make_in):
    gmail = make_in(Status.FAILED, to=["ann@gmail.com"], metadata={"order": "4711"})
    make_in(Status.FAILED, to=["bob@example.com"])
    make_in(Status.SENT, to=["carl@gmail.com"])
    assert listed(signed_in, "/messages?q=to:@gmail.com+status:failed") == [gmail]
    assert listed(signed_in, "/messages?status=failed&to=@gmail.com") == [gmail]
    assert listed(signed_in, "/messages?q=meta:order%3D4711") == [gmail]
    page = parse(signed_in.get("/messages?status=failed&to=@gmail.com&error=full"))
    assert page.find("input", id="q")["value"] == "to:@gmail.com error:full"
    said = page.find("p", class_="searched")
    assert (
        " ".join(said.text.split())
        == "1 message failed match “to:@gmail.com error:full”. Clear search"
    )


def test_a_status_term_chooses_the_tab(signed_in, make_in):
    failed = make_in(Status.FAILED)
    make_in(Status.SENT)
    page = parse(signed_in.get("/messages?q=status:failed+source:test"))
    current = [a for a in page.find("nav", class_="tabs").find_all("a") if a.get("aria-current")]
    assert current[0].text.split()[0] == "failed"
    assert listed(signed_in, "/messages?q=status:failed+source:test") == [failed]


@pytest.mark.parametrize("query, named", [
    ("q=colour:red", "colour:"), ("q=since:yesterday", "since:yesterday"),
    ("to=gmail.com", "to:gmail.com"), ("q=status:lost", "status:lost"),
    ("q=mailing:x", "mailing:x"), ("q=error:%22open", "quote"),
])  # fmt: skip
def test_a_bad_term_answers_400_with_the_page_naming_it(signed_in, make_in, query, named):
    make_in(Status.FAILED)
    response = signed_in.get(f"/messages?{query}")
    assert response.status_code == 400
    page = parse(response)
    (alert,) = page.find_all("p", role="alert")
    assert named in alert.text and alert.text.startswith("The list was not filtered")
    assert page.find("tbody", id="rows").find_all("a") == []


def test_each_chip_removes_its_own_term_and_paging_keeps_the_filter(
    signed_in, make_in, monkeypatch
):
    monkeypatch.setattr(reports, "PAGE_SIZE", 2)
    wanted = [make_in(Status.FAILED, to=[f"m{n}@gmail.com"], subject="Invoice") for n in range(5)]
    make_in(Status.FAILED, to=["x@example.com"], subject="Invoice")
    page = parse(signed_in.get("/messages?q=to:@gmail.com+invoice"))
    chips = {
        li.find("span").text: li.find("a")["href"] for li in page.find_all("li", class_="chip")
    }
    assert set(chips) == {"to:@gmail.com", "invoice"}
    assert parse_qs(urlsplit(chips["to:@gmail.com"]).query)["q"] == ["invoice"]
    assert parse_qs(urlsplit(chips["invoice"]).query)["q"] == ["to:@gmail.com"]
    seen, path = [], "/messages?q=to:@gmail.com+invoice"
    while path:
        page = parse(signed_in.get(path))
        seen += listed(signed_in, path)
        older = [
            a["href"] for a in page.find("nav", class_="pager").find_all("a") if a.text == "Older"
        ]
        path = older[0] if older else None
        if path:
            assert parse_qs(urlsplit(path).query)["q"] == ["to:@gmail.com invoice"]
    assert sorted(seen) == wanted


def test_the_page_says_when_the_window_cut_the_search(signed_in, make_message, monkeypatch):
    monkeypatch.setattr(reports, "SEARCH_WINDOW", 3)
    ids = [make_message(subject="rare" if n == 0 else "other").id for n in range(6)]
    page = parse(signed_in.get("/messages?q=subject:rare"))
    (note,) = page.find_all("p", class_="window-cut")
    assert f"#{ids[3]}" in note.text
    assert listed(signed_in, "/messages?q=subject:rare") == []


def test_a_job_is_asked_for_then_started_and_its_page_shows_it_done(app, signed_in, make_in):
    failed = [make_in(Status.FAILED, to=[f"m{n}@gmail.com"]) for n in range(3)]
    other = make_in(Status.FAILED, to=["x@example.com"])
    page = parse(signed_in.get("/messages?q=to:@gmail.com&status=failed"))
    links = {a.text.strip(): a["href"] for a in page.find("div", class_="bulk-all").find_all("a")}
    assert set(links) == {"Resend all matching"}  # failed ones cannot be cancelled
    asked = signed_in.get(links["Resend all matching"])
    assert asked.status_code == 200 and parse(asked).find("h1").text == "Resend all 3 matching?"
    form = parse(asked).find("form", class_="confirm")
    fields = {i["name"]: i["value"] for i in form.find_all("input")}
    assert db.session.query(BulkJob).count() == 0
    started = signed_in.post(form["action"], data=fields)
    assert started.status_code == 302
    (job,) = db.session.query(BulkJob).all()
    assert started.headers["Location"] == f"/messages/jobs/{job.id}"
    shown = parse(signed_in.get(started.headers["Location"]))
    assert shown.find("section", id="job")["hx-trigger"] == "every 1s"
    bulk_jobs.work("w1", ALLOWANCE)
    part = signed_in.get(started.headers["Location"], headers=htmx(signed_in))
    assert part.status_code == 286  # done: htmx stops polling
    outcome = parse(part).find("p", class_="job-outcome")
    assert outcome.text == "Done: 3 messages queued again."
    assert [fresh(pk).status for pk in failed] == ["queued"] * 3 and fresh(other).status == "failed"
    assert "bulk_job_resend" in {a.action for a in db.session.query(AuditEvent)}


def test_a_job_needs_csrf_a_filter_and_a_move(signed_in, make_in):
    make_in(Status.FAILED)
    path = "/messages/jobs/new?move=resend&q=source:test"
    assert signed_in.post(path, data={"confirmed": "yes"}).status_code == 400
    token = csrf(signed_in, "/messages")
    assert (
        signed_in.post(
            "/messages/jobs/new?move=resend", data={"confirmed": "yes", "csrf_token": token}
        ).status_code
        == 400
    )
    assert signed_in.get("/messages/jobs/new?move=delete&q=source:test").status_code == 400
    assert signed_in.get("/messages/jobs/new?move=resend&q=colour:red").status_code == 400
    assert db.session.query(BulkJob).count() == 0
    assert signed_in.get("/messages/jobs/999").status_code == 404


def test_only_roles_allowed_bulk_may_start_a_job_or_see_its_buttons(app, staff, make_in):
    make_in(Status.FAILED)
    viewer = as_role(app, staff, "viewer")
    assert 'class="bulk-all"' not in viewer.get("/messages?q=source:test").data.decode()
    assert viewer.get("/messages/jobs/new?move=resend&q=source:test").status_code == 403
    token = csrf(viewer, "/messages")
    refused = viewer.post("/messages/jobs/new?move=resend&q=source:test",
                          data={"confirmed": "yes", "csrf_token": token})  # fmt: skip
    assert refused.status_code == 403 and db.session.query(BulkJob).count() == 0
    sender = as_role(app, staff, "sender")
    assert 'class="bulk-all"' in sender.get("/messages?q=source:test").data.decode()
    token = csrf(sender, "/messages")
    started = sender.post("/messages/jobs/new?move=resend&q=source:test",
                          data={"confirmed": "yes", "csrf_token": token})  # fmt: skip
    assert started.status_code == 302 and db.session.query(BulkJob).count() == 1
