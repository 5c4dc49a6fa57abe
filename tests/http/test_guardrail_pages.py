"""The guardrails on the dashboard: the rates table, the paused domain, its resume (admins,
CSRF, audited, answered in place), and outbox guardrails on the command line."""

import getpass

from sqlalchemy import select

from outbox.capabilities.guardrails import hours, pauses
from outbox.capabilities.guardrails.rates import Counts, hour_of
from outbox.models import AuditEvent, utcnow
from outbox.models.db import db
from tests.support.metrics import samples, value
from tests.support.pages import as_role, csrf, htmx, notice_of, parse

NEWS = "news.example"


def tripped(app) -> None:  # type: ignore[no-untyped-def]
    """news.example's broadcast mail paused by its bounces; shop.example under every threshold."""
    app.config.update(GUARDRAIL_MIN_RECIPIENTS=10)
    now = utcnow()
    hours.add({(hour_of(now), NEWS, "broadcast"): Counts(sent=100, bounced=7, complained=1),
               (hour_of(now), "shop.example", "transactional"): Counts(sent=5)})  # fmt: skip
    db.session.commit()
    assert [rate.domain for rate in pauses.check(now)] == [NEWS]


def cells(page) -> dict[tuple[str, str, str], list[str]]:  # type: ignore[no-untyped-def]
    """The table's rows by domain, stream and window: each rate cell's text."""
    table = page.find("table", class_="guardrails")
    found = {}
    for tr in table.find("tbody").find_all("tr"):
        texts = [" ".join(td.text.split()) for td in tr.find_all("td")]
        found[tuple(texts[:3])] = texts[3:]
    return found


def test_the_dashboard_shows_each_rate_against_its_threshold_and_the_paused_domain(app, staff):
    admin = as_role(app, staff, "admin")
    assert parse(admin.get("/")).find_all("table", class_="guardrails") == []  # none counted
    tripped(app)
    page = parse(admin.get("/"))
    rows = cells(page)
    assert rows[(NEWS, "broadcast", "24h")] == [
        "1.00% of 100 (limit 0.3%) over",
        "7.00% of 100 (limit 5%) over",
        "0.00% of 100 (limit 10%)",
    ]
    assert (
        rows[("shop.example", "transactional", "7d")][1] == "0.00% of 5 (limit 5%) too few to count"
    )
    banner = page.find("div", class_="domain-paused")
    assert "Broadcast mail from news.example is paused" in " ".join(banner.text.split())
    assert "complaints 1.00% of 100 recipients" in banner.text  # complaints name the trip
    form = banner.find("form")
    assert form["hx-post"] == f"/guardrails/{NEWS}/resume" and form["hx-target"] == "#guardrails"
    live = parse(admin.get("/", headers=htmx(admin)))  # the live part keeps it current
    assert live.find("div", class_="domain-paused") and live.find("table", class_="guardrails")


def test_only_an_admin_may_resume_with_a_csrf_token_and_it_answers_in_place(app, staff):
    tripped(app)
    path = f"/guardrails/{NEWS}/resume"
    for role in ("viewer", "sender"):
        client = as_role(app, staff, role)
        assert parse(client.get("/")).find("div", class_="domain-paused").find_all("form") == []
        refused = client.post(path, data={"csrf_token": csrf(client, "/")})
        assert refused.status_code == 403, role
    admin = as_role(app, staff, "admin")
    assert admin.post(path).status_code == 400  # no CSRF token
    assert pauses.held() == {NEWS}
    answer = admin.post(path, headers=htmx(admin))
    assert answer.status_code == 200 and "HX-Request" in answer.vary
    assert answer.headers["Cache-Control"] == "no-store"
    part = parse(answer)
    assert part.find("section", id="guardrails") and part.find_all("h1") == []
    # What happened is said in the page's notice, outside the live part a push replaces.
    assert notice_of(answer) == {"text": f"Resumed broadcast mail from {NEWS}.", "refused": False}
    assert part.find_all("p", class_="notice") == []
    assert part.find_all("div", class_="domain-paused") == []
    assert pauses.held() == frozenset()
    again = admin.post(path, headers=htmx(admin))  # a refusal, with the part as it is
    assert again.status_code == 200 and parse(again).find("section", id="guardrails")
    refused = f"{NEWS} is not paused: nothing to resume."
    assert notice_of(again) == {"text": refused, "refused": True}
    flashed = admin.post(path, data={"csrf_token": csrf(admin, "/")})  # without htmx
    assert flashed.status_code == 302
    assert refused in admin.get(flashed.headers["Location"]).get_data(as_text=True)
    (row,) = db.session.execute(
        select(AuditEvent.actor, AuditEvent.action, AuditEvent.detail)
    ).all()  # the refusal left none
    assert tuple(row) == ("staff@example.com", "guardrail resume", NEWS)


def test_outbox_guardrails_status_and_resume_on_the_command_line(app, runner):
    tripped(app)
    status = runner.invoke(args=["guardrails", "status"])
    assert status.exit_code == 0, status.output
    assert f"paused {NEWS} since " in status.output
    assert f"{NEWS} broadcast 24h bounces: 7.00% of 100, threshold 5% OVER" in status.output
    resumed = runner.invoke(args=["guardrails", "resume", NEWS.upper()])
    assert resumed.output == f"resumed broadcast mail from {NEWS}\n"
    again = runner.invoke(args=["guardrails", "resume", NEWS])
    assert again.output == f"{NEWS} is not paused: nothing to resume\n"
    actors = db.session.execute(select(AuditEvent.actor, AuditEvent.action)).all()
    assert [tuple(a) for a in actors] == [(f"cli:{getpass.getuser()}", "guardrail resume")]


def test_the_metrics_give_each_rate_and_each_paused_domain(app, client):
    app.config["METRICS_TOKEN"] = "scrape-me"
    tripped(app)
    page = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    found = samples(page.get_data(as_text=True))
    labels = dict(domain=NEWS, stream="broadcast", window="24h")
    assert value(found, "outbox_guardrail_rate", kind="bounces", **labels) == 7.0
    assert value(found, "outbox_guardrail_rate", kind="complaints", **labels) == 1.0
    assert ("outbox_guardrail_rate", tuple(sorted({**labels, "kind": "refusals"}.items()))) in found
    assert value(found, "outbox_domain_paused", domain=NEWS) == 1.0
    pauses.resume(NEWS, "admin@example.com")
    found = samples(client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
                    .get_data(as_text=True))  # fmt: skip
    assert value(found, "outbox_domain_paused", domain=NEWS) == 0.0
    assert ("outbox_domain_paused", (("domain", NEWS),)) in found
