"""Throttling meets a real SMTP server: a 421 or 4.7.x slows the domain; the dashboard says why."""

from datetime import timedelta

import pytest

from outbox import queue
from outbox.capabilities import throttle
from outbox.capabilities.throttle import buckets
from outbox.models import Throttle, utcnow
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.pages import parse
from tests.support.rows import fresh
from tests.support.throttling import with_limits


def bucket(name: str) -> Throttle | None:
    db.session.expire_all()
    return db.session.get(Throttle, name)


@pytest.mark.all_databases
def test_a_4_7_1_refusal_from_the_server_slows_that_domain_and_not_the_others(
    smtp_app, smtp, make_message, db_kind
):
    with_limits(smtp_app, {"slow.example": 10, "*": 100})
    smtp.recorder.rcpt_replies["a@slow.example"] = "450 4.7.1 Try again later"
    refused = make_message(to=["a@slow.example", "b@fine.example"])
    sent = make_message(to=["c@fine.example"])
    tally = Worker().drain()
    assert tally.sent == 1 and tally.deferred == 1
    slowed = bucket("domain:slow.example")
    assert slowed is not None and slowed.factor == 0.5
    assert slowed.reason == "450 4.7.1 Try again later"
    assert slowed.slowed_at is not None and utcnow() - slowed.slowed_at < timedelta(minutes=1)
    fine = bucket("domain:*")
    assert fine is not None and fine.factor == 1  # fine.example's limit is *, untouched
    assert bucket("domain:fine.example") is None
    assert fresh(refused.id).attempts == 1 and fresh(sent.id).status == "sent"


def test_a_421_at_the_end_of_data_slows_the_domain_and_the_dashboard_says_why(
    smtp_app, smtp, make_message, signed_in
):
    with_limits(smtp_app, {"gmail.com": 20})
    smtp.recorder.data_replies.append("421 4.7.0 Too many connections, slow down")
    make_message(to=["x@gmail.com"])
    assert "Held back by rate limits" not in signed_in.get("/").get_data(as_text=True)
    Worker().drain()
    slowed = bucket("domain:gmail.com")
    assert slowed is not None and slowed.factor == 0.5
    assert slowed.reason == "421 4.7.0 Too many connections, slow down"

    live = parse(signed_in.get("/", headers={"HX-Request": "true"}))  # the part the page polls
    panel = live.find("section", id="throttles")
    row = panel.find("tbody").find("tr")
    cells = [" ".join(td.text.split()) for td in row.find_all("td")]
    assert cells[0] == "domain:gmail.com"
    assert cells[1] == "10 of 20 a second"
    assert cells[2].startswith("slowed down ") and "421 4.7.0 Too many connections" in cells[2]

    # Recovered in full, it leaves the panel (and the panel the page).
    slowed.slowed_at = utcnow() - timedelta(seconds=buckets.RECOVER_EVERY * 4)
    db.session.commit()
    assert parse(signed_in.get("/")).find_all("section", id="throttles") == []


def test_the_dashboard_shows_a_domain_at_its_limit_while_messages_wait_for_their_turn(
    app, make_message, signed_in
):
    # The turns are given a minute ahead of the clock: the domain is still held when the
    # page is drawn, however long a busy machine takes to draw it.
    now = utcnow() + timedelta(minutes=1)
    route = with_limits(app, {"example.com": 10})
    for _ in range(5):
        make_message(now=now)
    throttle.admit(queue.claim_batch("w1", 10, now=now, with_mail=True), route, now)
    panel = parse(signed_in.get("/")).find("section", id="throttles")
    row = panel.find("tbody").find("tr")
    cells = [" ".join(td.text.split()) for td in row.find_all("td")]
    assert cells[:3] == ["domain:example.com", "10 of 10 a second", "at its limit"]
    held_until = bucket("domain:example.com").held_until  # type: ignore[union-attr]
    assert held_until is not None and held_until > now  # the last turn given (3 held back)
    assert (
        row.find_all("td")[3].find("time")["datetime"] == held_until.isoformat("T", "seconds") + "Z"
    )


@pytest.mark.all_databases
def test_one_pass_sends_a_throttled_backlog_at_its_limit_without_spending_attempts(
    smtp_app, smtp, make_message
):
    with_limits(smtp_app, {"example.com": 20})  # a bucket of 4, 20 a second after
    due = [make_message(to=[f"r{n}@example.com"]) for n in range(40)]
    tally = Worker().drain()  # one pass, as at the default 20 s tick: it waits for the turns
    assert (tally.sent, tally.deferred, tally.failed) == (40, 0, 0)
    assert tally.held > 0  # held back and sent later in the same pass
    assert sorted(smtp.recorder.message_ids()) == sorted(m.message_id for m in due)
    assert {fresh(m.id).attempts for m in due} == {1}
