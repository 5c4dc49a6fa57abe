"""The guardrails' arithmetic: windows, rates, the minimum, the tripping rule, what counts."""

from datetime import datetime, timedelta

import pytest

from outbox.capabilities.guardrails import hours
from outbox.capabilities.guardrails import settings as guardrail_settings
from outbox.capabilities.guardrails.rates import (
    BOUNCES,
    COMPLAINTS,
    REFUSALS,
    Counts,
    Rate,
    Thresholds,
    first_hour,
    judged,
    tripped,
    window_start,
    windowed,
)
from outbox.config import DEFAULTS
from outbox.core.addresses import Kind
from outbox.core.recipients import Recipient, State
from outbox.core.status import Status

NOW = datetime(2030, 3, 10, 12, 40)
HOUR = NOW.replace(minute=0)
LOW = Thresholds(bounces=5.0, complaints=0.3, refusals=10.0, minimum=100)


def rate(kind: str, count: int, recipients: int, threshold: float = 5.0) -> Rate:
    return Rate("news.example", "broadcast", kind, "24h", count, recipients, threshold, 100)


def test_the_defaults_are_the_documented_thresholds():
    assert Thresholds.from_config(DEFAULTS) == Thresholds(5.0, 0.3, 10.0, 100)


def test_a_rate_is_over_only_strictly_above_its_threshold_and_with_enough_recipients():
    assert rate(BOUNCES, 6, 100).over  # 6% > 5%
    assert not rate(BOUNCES, 5, 100).over  # exactly at the threshold
    assert not rate(BOUNCES, 1, 3).over  # one bounce of 3 mails: too few to count
    assert rate(BOUNCES, 1, 3).percent == pytest.approx(33.333, abs=0.01)
    assert not rate(BOUNCES, 0, 0).over and rate(BOUNCES, 0, 0).percent is None
    assert rate(COMPLAINTS, 4, 1000, threshold=0.3).over  # 0.4%
    assert not rate(COMPLAINTS, 3, 1000, threshold=0.3).over  # 0.3%


def test_refusals_are_a_share_of_the_recipients_tried_bounces_and_complaints_of_those_sent():
    counts = Counts(sent=90, refused=10, bounced=9, complained=1)
    assert counts.fractions() == {COMPLAINTS: (1, 90), BOUNCES: (9, 90), REFUSALS: (10, 100)}
    assert Counts(1, 2, 3, 4) + Counts(10, 20, 30, 40) == Counts(11, 22, 33, 44)
    assert not Counts() and Counts(refused=1)


def test_the_24_hour_window_holds_the_current_hour_and_the_23_before_it():
    assert window_start(NOW, "24h") == HOUR - timedelta(hours=23)
    assert window_start(NOW, "7d") == HOUR - timedelta(hours=167)
    assert first_hour(NOW) == window_start(NOW, "7d")
    inside, outside = HOUR - timedelta(hours=23), HOUR - timedelta(hours=24)
    found = windowed([(inside, "a.example", "broadcast", Counts(sent=10)),
                      (outside, "a.example", "broadcast", Counts(sent=5)),
                      (HOUR, "a.example", "transactional", Counts(sent=1))], NOW)  # fmt: skip
    assert found[("a.example", "broadcast", "24h")] == Counts(sent=10)
    assert found[("a.example", "broadcast", "7d")] == Counts(sent=15)
    assert found[("a.example", "transactional", "24h")] == Counts(sent=1)


def test_a_resumed_domain_counts_only_the_hours_from_counts_from_on():
    before, after = HOUR - timedelta(hours=2), HOUR + timedelta(hours=1)
    rows = [(before, "a.example", "broadcast", Counts(sent=100, bounced=50)),
            (after, "a.example", "broadcast", Counts(sent=3)),
            (before, "b.example", "broadcast", Counts(sent=7))]  # fmt: skip
    later = NOW + timedelta(hours=1)
    found = windowed(rows, later, {"a.example": HOUR + timedelta(hours=1)})
    assert found[("a.example", "broadcast", "24h")] == Counts(sent=3)
    assert found[("b.example", "broadcast", "24h")] == Counts(sent=7)  # not resumed: all of it


def test_each_domain_trips_once_named_by_complaints_first_then_the_shorter_window():
    counts = {("a.example", "broadcast", "24h"): Counts(sent=1000, bounced=60, complained=4),
              ("a.example", "broadcast", "7d"): Counts(sent=2000, bounced=120, complained=8),
              ("b.example", "transactional", "7d"): Counts(sent=200, refused=50),
              ("c.example", "broadcast", "24h"): Counts(sent=1000, bounced=50, complained=3),
              ("d.example", "broadcast", "24h"): Counts(sent=20, bounced=20)}  # fmt: skip
    found = tripped(judged(counts, LOW))
    assert set(found) == {"a.example", "b.example"}  # c at the thresholds; d too few
    a = found["a.example"]
    assert (a.kind, a.window, a.count, a.recipients) == (COMPLAINTS, "24h", 4, 1000)
    assert a.reason() == ("complaints 0.40% of 1000 recipients of broadcast mail in the last "
                          "24h, over the threshold of 0.3%")  # fmt: skip
    b = found["b.example"]  # a transactional stream's rate pauses the domain's broadcast too
    assert (b.kind, b.stream, b.window, b.percent) == (REFUSALS, "transactional", "7d", 20.0)


def entry(address: str, state: State | None = None, attempts: int | None = None,
          code: int | None = None) -> Recipient:  # fmt: skip
    return Recipient(Kind.TO, address, state=state, attempts=attempts, code=code)


def test_an_attempt_counts_the_recipients_it_settled_not_those_of_earlier_attempts():
    entries = [entry("a@x.example", State.SENT, attempts=1),  # the first attempt's
               entry("b@x.example", State.SENT, attempts=2),
               entry("c@x.example", State.FAILED, attempts=2, code=550),
               entry("d@x.example", State.FAILED, attempts=2, code=452),  # given up, not refused
               entry("e@x.example", State.SUPPRESSED),
               entry("f@x.example")]  # settled by the message's status  # fmt: skip
    assert hours.settled(entries, Status.SENT, 2, None) == (2, 1)  # sent, refused
    assert hours.settled([entry("a@x.example")], Status.FAILED, 1, 550) == (0, 1)
    assert hours.settled([entry("a@x.example")], Status.FAILED, 3, 451) == (0, 0)
    assert hours.settled([entry("a@x.example")], Status.DEFERRED, 1, 450) == (0, 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GUARDRAIL_BOUNCE_RATE", 0.0),
        ("GUARDRAIL_COMPLAINT_RATE", 101.0),
        ("GUARDRAIL_REFUSAL_RATE", -1.0),
        ("GUARDRAIL_MIN_RECIPIENTS", 0),
    ],  # fmt: skip
)
def test_the_settings_refuse_rates_that_are_not_per_cents_and_a_minimum_below_one(name, value):
    guardrail_settings.check(DEFAULTS)
    with pytest.raises(ValueError, match=name):
        guardrail_settings.check({**DEFAULTS, name: value})
