"""The state machine and retry schedule, without a database."""

from datetime import datetime, timedelta

from outbox.status import CLAIMABLE, Status, can_move, next_attempt_at, retry_delay, sources

NOW = datetime(2026, 1, 1, 12, 0, 0)


def test_only_waiting_messages_are_claimable():
    assert set(CLAIMABLE) == {Status.QUEUED, Status.DEFERRED}
    assert all(can_move(s, Status.SENDING) for s in CLAIMABLE)
    assert not can_move(Status.SENT, Status.SENDING)
    assert not can_move(Status.FAILED, Status.SENDING)


def test_sent_is_final():
    assert not any(can_move(Status.SENT, s) for s in Status)


def test_resend_and_cancel_sources():
    assert set(sources(Status.CANCELLED)) == {Status.QUEUED, Status.DEFERRED}
    assert {Status.FAILED, Status.CANCELLED} <= set(sources(Status.QUEUED))


def test_backoff_grows_and_is_capped():
    delays = [retry_delay(n, 60, 2, 600) for n in range(1, 7)]
    assert delays == [60, 120, 240, 480, 600, 600]


def test_backoff_of_one_is_a_fixed_delay():
    assert {retry_delay(n, 30, 1, 3600) for n in range(1, 10)} == {30}


def test_huge_attempt_counts_do_not_overflow():
    assert retry_delay(10_000, 60, 2, 3600) == 3600


def test_next_attempt_at_adds_the_delay():
    assert next_attempt_at(2, NOW, 10, 3, 1000) == NOW + timedelta(seconds=30)
