"""Throttling: the bucket's arithmetic, admit's hand-back, slowing down on 421 / 4.7.x."""

from datetime import datetime, timedelta

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, func, select

from outbox import queue
from outbox.capabilities import throttle
from outbox.capabilities.throttle import buckets, keys, taking
from outbox.capabilities.throttle.buckets import Bucket, burst_of
from outbox.core.deliveries import Reply
from outbox.core.status import Outcome, Status
from outbox.models import Attempt, Message, Throttle, utcnow
from outbox.models.db import db
from outbox.smtp.replies import Result
from tests.support.rows import fresh
from tests.support.throttling import with_limits

T0 = datetime(2026, 11, 24, 8, 0, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- the bucket's arithmetic, time passed in ---


def test_the_bucket_holds_a_fifth_of_a_second_of_sending_and_at_least_one_mail():
    assert burst_of(10) == 2 and burst_of(200) == 40
    assert burst_of(1) == 1 and burst_of(0.1) == 1


def test_a_full_bucket_lets_its_burst_through_then_one_mail_per_interval():
    bucket = Bucket.full("domain:example.com", 10, T0)
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    bucket.refill(at(0.05))
    assert not bucket.take()  # half a token
    bucket.refill(at(0.1))
    assert bucket.take() and not bucket.take()
    bucket.refill(at(60))  # an hour idle still fills it only to its size
    assert bucket.tokens == 2


def test_tokens_let_through_never_exceed_burst_plus_rate_times_time():
    bucket = Bucket.full("route:relay", 20, T0)
    granted = 0
    for step in range(1, 1001):  # asked every 7 ms for 7 s
        bucket.refill(at(step * 0.007))
        granted += bucket.take()
    assert granted <= burst_of(20) + 20 * 7
    assert granted >= 20 * 7 - 1  # and the rate is given in full, less the last token


def test_a_clock_behind_the_bucket_adds_nothing_and_does_not_move_it_back():
    bucket = Bucket.full("domain:example.com", 10, at(5))
    bucket.tokens = 0
    bucket.refill(at(4))  # another host's clock, a second behind
    assert bucket.tokens == 0 and bucket.updated_at == at(5)
    bucket.refill(at(5.1))
    assert bucket.tokens == pytest.approx(1)


def test_a_slow_down_halves_the_rate_once_per_gap_down_to_a_floor_and_recovers_by_steps():
    bucket = Bucket.full("domain:gmail.com", 20, T0)
    assert bucket.slow_down(at(0), "421 4.7.0 Too many connections")
    assert bucket.rate_at(at(0)) == 10 and bucket.reason == "421 4.7.0 Too many connections"
    assert not bucket.slow_down(at(1), "421 again")  # replies to mails sent before it
    assert bucket.rate_at(at(1)) == 10 and bucket.reason == "421 4.7.0 Too many connections"
    for n in range(10):
        bucket.slow_down(at(10 + n * buckets.SLOW_DOWN_GAP), "451 4.7.1 later")
    slowest = at(10 + 9 * buckets.SLOW_DOWN_GAP)
    assert bucket.rate_at(slowest) == 20 * buckets.MIN_FACTOR
    every = buckets.RECOVER_EVERY
    assert bucket.rate_at(slowest + timedelta(seconds=every - 1)) == 20 * buckets.MIN_FACTOR
    assert bucket.rate_at(slowest + timedelta(seconds=every)) == 20 * buckets.MIN_FACTOR * 1.25
    assert bucket.slowed(slowest + timedelta(seconds=12 * every))
    assert not bucket.slowed(slowest + timedelta(seconds=13 * every))
    assert bucket.rate_at(slowest + timedelta(seconds=13 * every)) == 20


def test_a_slowed_bucket_fills_more_slowly_and_holds_less():
    bucket = Bucket.full("domain:gmail.com", 20, T0)
    bucket.slow_down(T0, "421 slow down")
    assert bucket.tokens == 2  # a fifth of a second at 10 a second
    bucket.tokens = 0
    bucket.refill(at(0.1))
    assert bucket.tokens == pytest.approx(1)


def test_messages_held_back_get_turns_one_token_apart_after_those_held_before():
    bucket = Bucket.full("domain:example.com", 10, T0)
    bucket.tokens = 0.5
    first = bucket.turns(3, T0)
    assert first == [at(0.05), at(0.15), at(0.25)]
    assert bucket.turns(2, T0) == [at(0.35), at(0.45)]  # another batch, held before them
    later = bucket.turns(10_000, T0)
    booked = [t for t in later if t <= T0 + buckets.MAX_HOLD]
    assert len(booked) == 10 * buckets.MAX_HOLD.total_seconds() - 5  # a turn each, 0.1 s apart
    beyond = [t for t in later if t > T0 + buckets.MAX_HOLD]
    assert max(beyond) <= T0 + 2 * buckets.MAX_HOLD  # the rest within the next MAX_HOLD,
    assert len(set(beyond)) > len(beyond) * 0.9  # spread, not all at one instant
    assert bucket.held_until == T0 + buckets.MAX_HOLD


def test_a_421_or_4_7_x_asks_to_slow_down_and_other_refusals_do_not():
    slow = throttle._slow_down
    assert slow(421, "Service not available")
    assert slow(451, "4.7.1 Try again later") and slow(450, "451 4.7.0 too fast")
    assert not slow(450, "4.2.1 Mailbox busy") and not slow(550, "5.7.1 Relaying denied")
    assert not slow(451, "4.7.12345 nonsense") and not slow(None, None)


# --- admit and the hand-back, on every database ---


def claims_of(count: int, now: datetime) -> list[queue.Claim]:
    return queue.claim_batch("w1", count, now=now, with_mail=True)


def attempt_rows() -> int:
    return db.session.scalar(select(func.count()).select_from(Attempt)) or 0


def held_count() -> float:
    """outbox_messages_throttled_total{kind="domain"} of this process."""
    return REGISTRY.get_sample_value("outbox_messages_throttled_total", {"kind": "domain"}) or 0


def bucket(name: str) -> Throttle | None:
    db.session.expire_all()
    return db.session.get(Throttle, name)


@pytest.mark.all_databases
def test_without_limits_every_claim_goes_and_no_row_is_touched(app, make_message, db_kind):
    now = utcnow()
    route = with_limits(app, {})
    for _ in range(3):
        make_message(now=now)
    claims = claims_of(10, now)
    statements: list[str] = []
    listen = lambda *args: statements.append(args[2])  # noqa: E731 (before_cursor_execute)
    event.listen(db.engine, "before_cursor_execute", listen)
    try:
        assert throttle.admit(claims, route, now) == claims
        route = with_limits(app, {"gmail.com": 20})  # a limit, but not for these
        assert throttle.admit(claims, route, now) == claims
    finally:
        event.remove(db.engine, "before_cursor_execute", listen)
    assert statements == []  # not a query
    assert db.session.scalar(select(func.count()).select_from(Throttle)) == 0


@pytest.mark.all_databases
def test_admit_lets_a_burst_through_and_holds_the_rest_back_without_an_attempt(
    app, make_message, db_kind
):
    now = utcnow() - timedelta(seconds=5)
    route = with_limits(app, {"example.com": 10})
    made = [make_message(now=now, to=[f"r{n}@Example.com"]) for n in range(5)]
    free = make_message(now=now, to=["someone@elsewhere.example"])
    retried = make_message(now=now, to=["again@example.com"])
    db.session.execute(
        Message.__table__.update()
        .where(Message.id == retried.id)
        .values(status=Status.DEFERRED.value, attempts=1)
    )
    db.session.commit()
    claims = claims_of(10, now)
    counted = held_count()
    admitted = throttle.admit(claims, route, now)

    assert held_count() == counted + 4
    assert [c.id for c in admitted] == [made[0].id, made[1].id, free.id]  # burst of 2, and free
    held = [fresh(m.id) for m in (*made[2:], retried)]
    assert [m.status for m in held] == ["queued"] * 3 + ["deferred"]
    assert [m.attempts for m in held] == [0, 0, 0, 1]
    assert all(m.locked_by is None for m in held)
    turns = sorted(m.next_attempt_at for m in held)
    assert turns[0] > now and len(set(turns)) == 4  # each its own turn, none at once
    assert turns == [now + timedelta(seconds=0.1 * (n + 1)) for n in range(4)]
    assert attempt_rows() == 0
    row = bucket("domain:example.com")
    assert row is not None and row.tokens == 0 and row.rate == 10 and row.burst == 2
    assert row.held_until == now + timedelta(seconds=0.5)
    assert fresh(made[0].id).status == "sending"  # the admitted stay claimed


@pytest.mark.all_databases
def test_a_claim_held_back_by_one_bucket_takes_no_token_of_another(app, make_message, db_kind):
    now = utcnow() - timedelta(seconds=5)
    route = with_limits(app, {"a.example": 10, "b.example": 10}, rate=100)
    first = make_message(now=now, to=["x@b.example"], priority=9)
    second = make_message(now=now, to=["y@b.example"], priority=8)
    both = make_message(now=now, to=["x@a.example", "y@b.example"], priority=1)
    admitted = throttle.admit(claims_of(10, now), route, now)
    assert [c.id for c in admitted] == [first.id, second.id]
    assert fresh(both.id).status == "queued"
    a, b, r = bucket("domain:a.example"), bucket("domain:b.example"), bucket("route:relay")
    assert a is not None and a.tokens == 2  # not spent on the message held back for b
    assert b is not None and b.tokens == 0
    assert r is not None and r.tokens == 20 - 2


@pytest.mark.all_databases
def test_domains_without_a_limit_share_the_star_bucket(app, make_message, db_kind):
    now = utcnow() - timedelta(seconds=5)
    route = with_limits(app, {"gmail.com": 20, "*": 5})
    for domain in ("one.example", "two.example", "gmail.com"):
        make_message(now=now, to=[f"x@{domain}"])
    admitted = throttle.admit(claims_of(10, now), route, now)
    assert len(admitted) == 2  # one from *, whose bucket holds one mail, and gmail
    star, gmail = bucket("domain:*"), bucket("domain:gmail.com")
    assert star is not None and star.tokens == 0 and star.burst == 1
    assert gmail is not None and gmail.tokens == 3


def test_a_hold_moves_only_claims_this_worker_still_holds(app, make_message):
    now = utcnow()
    mine, taken = make_message(now=now), make_message(now=now)
    claims = claims_of(10, now)
    db.session.execute(
        Message.__table__.update().where(Message.id == taken.id).values(locked_by="w2")
    )  # taken back and claimed by another worker meanwhile
    later = now + timedelta(seconds=3)
    assert queue.hold({c: later for c in claims}) == 1
    db.session.commit()
    assert fresh(mine.id).status == "queued" and fresh(mine.id).next_attempt_at == later
    assert fresh(taken.id).status == "sending" and fresh(taken.id).locked_by == "w2"


# --- observe: 421 and 4.7.x slow the domain down ---


@pytest.mark.all_databases
def test_a_4_7_x_refusal_halves_the_domain_and_the_next_one_within_the_gap_does_not(
    app, make_message, db_kind
):
    now = utcnow()
    route = with_limits(app, {"gmail.com": 20, "*": 100})
    mail = make_message(to=["a@gmail.com", "b@other.example", "c@fine.example"])
    said = {
        "a@gmail.com": Reply(Outcome.DEFERRED, 451, "4.7.1 Try again later"),
        "b@other.example": Reply(Outcome.DEFERRED, 421, "4.7.0 Too many connections"),
        "c@fine.example": Reply(Outcome.SENT, 250, ""),
    }
    throttle.observe(mail, Result(Outcome.SENT, recipients=said), route, now)
    gmail, other = bucket("domain:gmail.com"), bucket("domain:other.example")
    assert gmail is not None and gmail.factor == 0.5 and gmail.slowed_at == now
    assert gmail.reason == "451 4.7.1 Try again later"
    assert other is not None and other.factor == 0.5 and other.rate == 100  # the rate of *
    assert bucket("domain:fine.example") is None
    throttle.observe(mail, Result(Outcome.DEFERRED, 421, "421 closing"), route, now)
    assert bucket("domain:gmail.com").factor == 0.5  # type: ignore[union-attr]
    later = now + timedelta(seconds=buckets.SLOW_DOWN_GAP)
    throttle.observe(mail, Result(Outcome.DEFERRED, 421, "421 closing"), route, later)
    again = bucket("domain:gmail.com")
    assert again is not None and again.factor == 0.25 and again.reason == "421 closing"


@pytest.mark.all_databases
def test_a_domain_under_star_slowed_on_its_own_takes_from_its_own_bucket_too(
    app, make_message, db_kind
):
    now = utcnow() - timedelta(seconds=5)
    route = with_limits(app, {"*": 100})
    taking.slow_down("domain:slow.example", 100, now, "421 slow down")  # 50 a second, 10 held
    taking.slow_down("domain:slow.example", 100, now + timedelta(seconds=10), "421 again")
    for n in range(8):
        make_message(now=now, to=[f"x{n}@slow.example"])
    make_message(now=now, to=["y@fast.example"])
    later = now + timedelta(seconds=10)
    admitted = throttle.admit(claims_of(20, later), route, later)
    assert len(admitted) == 5 + 1  # its own bucket at 25 a second holds 5; fast.example goes
    own = bucket("domain:slow.example")
    assert own is not None and own.tokens == 0 and own.factor == 0.25


def test_a_421_on_connecting_slows_the_route_not_the_domains(app, make_message):
    route = with_limits(app, {"gmail.com": 20}, rate=50)
    mail = make_message(to=["a@gmail.com"])
    now = utcnow()
    said = Result(Outcome.DEFERRED, 421, "421 4.3.2 busy at relay:25", fault=True)
    throttle.observe(mail, said, route, now)
    relay = bucket("route:relay")
    assert relay is not None and relay.factor == 0.5 and relay.reason == said.error
    assert bucket("domain:gmail.com") is None
    without_rate = with_limits(app, {"gmail.com": 20})
    throttle.observe(mail, said, without_rate, now + timedelta(minutes=1))
    assert bucket("route:relay").factor == 0.5  # type: ignore[union-attr]


def test_observe_without_limits_touches_nothing(app, make_message):
    route = with_limits(app, {})
    mail = make_message(to=["a@gmail.com"])
    throttle.observe(mail, Result(Outcome.DEFERRED, 421, "421 4.7.0 slow"), route, utcnow())
    assert db.session.scalar(select(func.count()).select_from(Throttle)) == 0


def test_domains_are_matched_as_lower_case_a_labels():
    assert keys.domain_of("Ann@Bücher.Example") == "xn--bcher-kva.example"
    assert keys.limits({"Bücher.example": 5.0, "*": 1.0}) == {"xn--bcher-kva.example": 5.0,
                                                              "*": 1.0}  # fmt: skip
