"""core.latency: queue-to-250 as a figure, in words, and the quantiles of many."""

from datetime import datetime, timedelta

import pytest

from outbox.core import latency

T0 = datetime(2026, 1, 15, 9, 30)


@pytest.mark.parametrize(("seconds", "said"), [
    (0.0, "0 ms"), (0.0004, "0 ms"), (0.18, "180 ms"), (0.9994, "999 ms"), (0.9996, "1.0 s"),
    (4.23, "4.2 s"), (9.96, "10 s"), (38.4, "38 s"), (59.4, "59 s"), (59.6, "1 min"),
    (185, "3 min"), (3599, "1 h"), (7500, "2 h 5 min"),
])  # fmt: skip
def test_a_duration_is_said_in_the_unit_people_use(seconds, said):
    assert latency.in_words(seconds) == said


def test_queue_to_sent_is_from_stored_to_the_servers_250():
    assert latency.queue_to_sent(T0, T0 + timedelta(milliseconds=180)) == pytest.approx(0.18)
    assert latency.queue_to_sent(T0, None) is None  # not sent (yet)
    assert latency.queue_to_sent(None, T0) is None
    # Clocks of two hosts a little apart never make a negative wait.
    assert latency.queue_to_sent(T0, T0 - timedelta(milliseconds=3)) == 0.0
    assert latency.in_ms(0.1844) == 184 and latency.in_ms(None) is None


def test_quantiles_are_by_the_nearest_rank():
    values = [float(n) for n in range(100, 0, -1)]  # 1 to 100, in any order
    assert latency.quantile(values, 0.5) == 50.0
    assert latency.quantile(values, 0.95) == 95.0
    assert latency.quantile(values, 1.0) == 100.0
    assert latency.quantile([0.3], 0.95) == 0.3
    assert latency.quantile([], 0.5) is None
