"""core.charts: the windows, their buckets, the tally per bucket and the failure groups."""

from collections import Counter
from datetime import datetime, timedelta

import pytest

from outbox.core import charts
from outbox.core.charts import FAILED, SENT, Bucket, Chart, Outcome

NOW = datetime(2026, 3, 14, 15, 47, 12)


def test_a_window_comes_from_the_url_and_an_unknown_one_is_the_default():
    assert charts.window("1h").bucket == timedelta(minutes=5)
    assert charts.window("7d").buckets == 168
    default = charts.WINDOWS["24h"]
    assert charts.window("2y") is charts.window(None) is charts.window(["1h"]) is default


@pytest.mark.parametrize(("key", "first", "count"), [
    ("1h", datetime(2026, 3, 14, 14, 50), 12),
    ("24h", datetime(2026, 3, 13, 16, 0), 24),
    ("7d", datetime(2026, 3, 7, 16, 0), 168),
])  # fmt: skip
def test_the_buckets_end_with_the_one_now_is_in(key, first, count):
    starts = charts.starts(charts.WINDOWS[key], NOW)
    size = starts[1] - starts[0]
    assert (len(starts), starts[0], starts[-1]) == (count, first, charts.floor(NOW, size))
    assert starts[-1] <= NOW < starts[-1] + size


def test_floor_cuts_at_the_size_from_midnight():
    assert charts.floor(NOW, timedelta(minutes=5)) == datetime(2026, 3, 14, 15, 45)
    assert charts.floor(NOW, timedelta(hours=1)) == datetime(2026, 3, 14, 15, 0)
    on_the_mark = datetime(2026, 3, 14, 15, 45)
    assert charts.floor(on_the_mark, timedelta(minutes=5)) == on_the_mark


def test_tally_counts_per_bucket_and_takes_the_quantiles_of_the_sent_alone():
    at = datetime(2026, 3, 14, 15, 0)
    outcomes = [Outcome(at + timedelta(minutes=m), SENT, float(m)) for m in range(1, 21)]
    outcomes += [Outcome(at + timedelta(minutes=5), FAILED), Outcome(at, "cancelled")]
    outcomes += [Outcome(at - timedelta(seconds=1), SENT, 99.0)]  # before start: left out
    outcomes += [Outcome(at + timedelta(hours=1), SENT, None)]  # sent, no wait known
    found = charts.tally(outcomes, at, timedelta(hours=1))
    assert found == {
        at: Bucket(at, 20, 1, 10.0, 19.0),
        at + timedelta(hours=1): Bucket(at + timedelta(hours=1), 1, 0, None, None),
    }


def test_a_chart_scales_by_its_busiest_bucket_and_draws_only_timed_ones():
    at = datetime(2026, 3, 14, 15, 0)
    buckets = [Bucket(at, 3, 7, 1.0, 2.0), Bucket(at, 0, 0), Bucket(at, 1, 0, 0.5, 4.0)]
    chart = Chart("broadcast", charts.WINDOWS["24h"], buckets)
    assert (chart.sent, chart.failed, chart.peak, chart.slowest) == (4, 7, 7, 4.0)
    assert chart.timed
    assert chart.line("p95", 0, 300, 100) == "50.0,50.0 250.0,0.0"
    empty = Chart("broadcast", charts.WINDOWS["1h"], [Bucket(at)])
    assert (empty.peak, empty.slowest, empty.timed) == (1, 1.0, False)
    assert empty.line("p50", 0, 10, 10) == ""


@pytest.mark.parametrize(("error", "group"), [
    ("550 5.1.1 <ann@example.com>: Recipient address rejected: User unknown", "550 5.1.1"),
    ("550-5.7.1 [192.0.2.1] Our system has detected spam. q123", "550 5.7.1"),
    ("554 Transaction failed: message rejected", "554"),
    ("rcpt refused: 552 mailbox full (5.2.2)", "552 5.2.2"),
    ("5.4.4 host not found", "5.4.4"),
    ("every recipient is on the suppression list: ann@example.com (hard bounce)",
     "every recipient is on the suppression list"),
    ("connection refused", "connection refused"),
    ("", "no error recorded"),
    (None, "no error recorded"),
])  # fmt: skip
def test_a_failure_is_grouped_by_its_codes_not_its_words(error, group):
    assert charts.reason(error) == group


def test_domains_and_the_top_of_a_count():
    assert charts.domain("Ann@Example.COM") == "example.com"
    assert charts.domain("postmaster") == "postmaster"
    counts = Counter({"b.example": 3, "a.example": 3, "c.example": 5, "d.example": 1})
    assert charts.top(counts, 3) == [("c.example", 5), ("a.example", 3), ("b.example", 3)]


def test_a_reasons_failures_are_found_by_its_enhanced_code_else_as_it_reads():
    assert charts.error_term("550 5.1.1") == "5.1.1"
    assert charts.error_term("554") == "554"
    assert charts.error_term("connection refused") == "connection refused"
