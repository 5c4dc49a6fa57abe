"""Guardrails on a real database: outcomes counted, a trip pausing one domain's broadcast
mail only, its event told once, a resume, and a trip again only on new outcomes."""

import json
from datetime import timedelta
from email import message_from_bytes

import pytest
from sqlalchemy import select

from outbox import queue
from outbox.capabilities.bounces import store
from outbox.capabilities.guardrails import hours, pauses
from outbox.capabilities.guardrails.rates import Counts, hour_of, tripped
from outbox.capabilities.webhooks import endpoints
from outbox.core.streams import Stream
from outbox.models import DomainPause, WebhookDelivery, utcnow
from outbox.models.db import db
from outbox.worker import Worker
from tests.support import bouncemail, complaintmail

NEWS, OTHER = "news.example", "other.example"
A, B, C = "a@example.com", "b@example.com", "c@example.com"


def paused_events() -> list[dict[str, object]]:
    """The data of the domain.paused events queued."""
    db.session.expire_all()
    stmt = select(WebhookDelivery.payload).where(WebhookDelivery.kind == "domain.paused")
    return [json.loads(payload)["data"] for payload in db.session.scalars(stmt)]


def news_half_bounced(app, now):  # type: ignore[no-untyped-def]
    """NEWS's broadcast mail over its bounce threshold, with a hook for domain.paused: the
    rate a worker's check finds."""
    app.config.update(GUARDRAIL_MIN_RECIPIENTS=10, WEBHOOK_ALLOW_PRIVATE=True)
    endpoints.add("http://127.0.0.1:9/hook", "domain.paused")
    hours.add({(hour_of(now), NEWS, "broadcast"): Counts(sent=100, bounced=50)})
    db.session.commit()
    (rate,) = tripped(pauses.rates(now)).values()
    return rate


def rates_of(domain: str, stream: str, window: str = "24h") -> dict[str, tuple[int, int]]:
    return {r.kind: (r.count, r.recipients) for r in pauses.rates()
            if (r.domain, r.stream, r.window) == (domain, stream, window)}  # fmt: skip


@pytest.mark.all_databases
def test_sends_refusals_bounces_and_complaints_are_counted_for_their_domain_and_stream(
    smtp_app, smtp, make_message
):
    smtp_app.config.update(BOUNCE_ADDRESS="bounces@example.com")
    smtp.recorder.rcpt_replies[C] = "550 5.1.1 no such user"
    message = make_message(from_addr=f"letters@{NEWS}", to=[A, B, C], stream=Stream.BROADCAST)
    make_message(from_addr=f"shop@{OTHER}", to=[A])  # transactional, another domain
    Worker().drain()
    paths = {mail.rcpt_tos[0]: mail.mail_from for mail in smtp.received}
    assert rates_of(NEWS, "broadcast") == {"complaints": (0, 2), "bounces": (0, 2),
                                           "refusals": (1, 3)}  # fmt: skip
    assert rates_of(OTHER, "transactional")["bounces"] == (0, 1)
    store.take_in(bouncemail.postfix(paths[A], A, message.message_id), "smtp", None, [paths[A]])
    raw = complaintmail.yahoo("fbl@example.com", paths[B], B, message.message_id)
    store.take_in(raw, "imap")
    assert rates_of(NEWS, "broadcast") == {"complaints": (1, 2), "bounces": (1, 2),
                                           "refusals": (1, 3)}  # fmt: skip
    assert rates_of(NEWS, "broadcast", "7d")["bounces"] == (1, 2)
    assert rates_of(OTHER, "transactional")["bounces"] == (0, 1)


@pytest.mark.all_databases
def test_a_workers_counts_are_written_once_committed_and_flushed_and_dropped_on_a_rollback(
    smtp_app, smtp, make_message
):
    make_message(from_addr=f"letters@{NEWS}", to=[A, B], stream=Stream.BROADCAST)
    Worker().drain()
    assert hours.since(utcnow() - timedelta(days=1)) == []  # not in the record's transaction
    assert hours.flush() == 1 and hours.flush() == 0
    ((_, domain, stream, counts),) = hours.since(utcnow() - timedelta(days=1))
    assert (domain, stream, counts) == (NEWS, "broadcast", Counts(sent=2))
    db.session.info[hours.STAGED] = {(hour_of(utcnow()), NEWS, "broadcast"): [5, 0]}
    db.session.rollback()  # a group whose transaction did not commit counts nothing
    assert hours.flush() == 0
    db.session.info[hours.STAGED] = {(hour_of(utcnow()), NEWS, "broadcast"): [5, 0]}
    db.session.commit()
    assert hours.flush() == 1
    assert rates_of(NEWS, "broadcast")["bounces"] == (0, 7)


@pytest.mark.all_databases
def test_a_trip_holds_that_domains_broadcast_mail_only_until_an_admin_resumes_it(
    smtp_app, smtp, make_message
):
    smtp_app.config.update(GUARDRAIL_MIN_RECIPIENTS=10, WEBHOOK_ALLOW_PRIVATE=True)
    endpoints.add("http://127.0.0.1:9/hook", "domain.paused")
    now = utcnow()
    hours.add({(hour_of(now), NEWS, "broadcast"): Counts(sent=100, bounced=6),
               (hour_of(now), OTHER, "broadcast"): Counts(sent=100, bounced=5)})  # fmt: skip
    db.session.commit()
    (made,) = pauses.check(now)
    assert (made.domain, made.kind, made.window, made.percent) == (NEWS, "bounces", "24h", 6.0)
    assert pauses.check(now) == []  # paused already: no second trip, no second event
    (event,) = paused_events()
    assert event["metadata"]["domain"] == NEWS and event["metadata"]["kind"] == "bounces"
    assert "bounces 6.00% of 100 recipients" in event["text"]
    held = make_message(from_addr="letters@News.Example", subject="held", stream=Stream.BROADCAST)
    make_message(from_addr=f"reset@{NEWS}", subject="transactional")
    make_message(from_addr=f"letters@{OTHER}", subject="other", stream=Stream.BROADCAST)
    Worker().drain()
    assert sorted(message_from_bytes(m.content)["Subject"] for m in smtp.received) == [
        "other",
        "transactional",
    ]
    assert not queue.has_due(held=pauses.held()) and queue.has_due()
    lifted = pauses.resume(NEWS.upper(), "admin@example.com", now)
    assert lifted is not None and lifted.resumed_by == "admin@example.com"
    assert pauses.resume(NEWS, "admin@example.com", now) is None  # not paused now
    assert pauses.held() == frozenset()
    Worker().drain()
    assert len(smtp.received) == 3 and held.message_id in smtp.received[-1].content.decode()
    assert pauses.check(now) == []  # the window that tripped it counts no more
    later = hour_of(now) + timedelta(hours=1)
    hours.add({(later, NEWS, "broadcast"): Counts(sent=10, complained=1)})
    db.session.commit()
    (again,) = pauses.check(later)
    assert (again.kind, again.recipients) == ("complaints", 10)
    assert len(paused_events()) == 2
    row = db.session.get(DomainPause, NEWS)
    assert row.paused_at == later and row.span == "24h" and row.threshold == 0.3


@pytest.mark.all_databases
def test_two_workers_finding_the_same_rate_over_pause_and_tell_once(app):
    now = utcnow()
    rate = news_half_bounced(app, now)
    assert pauses.trip(rate, now) is True
    assert pauses.trip(rate, now) is False
    assert len(paused_events()) == 1


@pytest.mark.all_databases
def test_a_rate_read_before_a_resume_does_not_pause_the_domain_again_after_it(app):
    now = utcnow()
    rate = news_half_bounced(app, now)
    assert pauses.trip(rate, now) is True
    # Another worker's check reads the rates while the domain is paused; an admin resumes
    # before that check gets to pause it: the rate counted hours that no longer count.
    (stale,) = tripped(pauses.rates(now)).values()
    assert pauses.resume(NEWS, "admin@example.com", now) is not None
    assert pauses.trip(stale, now) is False
    assert pauses.held() == frozenset() and len(paused_events()) == 1
    assert pauses.check(now) == []
