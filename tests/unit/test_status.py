"""The state machine and retry schedule, without a database."""

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from outbox.core.status import (
    CLAIMABLE,
    WATCHDOG_LATENESS,
    Lease,
    Retry,
    Status,
    can_move,
    next_attempt_at,
    retry_delay,
    shortest_lock_timeout,
    sources,
)

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


@settings(max_examples=300, deadline=None)
@given(
    lock_timeout=st.floats(min_value=0.1, max_value=1e7, allow_nan=False),
    record_after=st.floats(min_value=1e-3, max_value=1e7, allow_nan=False),
)
def test_a_claim_holds_until_its_worker_has_written_every_outcome(lock_timeout, record_after):
    lease = Lease(lock_timeout, record_after)
    # A send starts at most renew_every after the last renewal, is cut off after
    # send_deadline (noticed up to WATCHDOG_LATENESS of it late), and its outcome is
    # written before the next renewal: all before another worker may take the claim,
    # with a sixth of the lease or more to spare for the write and for clocks.
    assert lease.last_write_by == lease.renew_every + lease.send_deadline * (1 + WATCHDOG_LATENESS)
    assert lease.last_write_by <= lock_timeout * (13 / 16 + 1e-12)
    # An outcome waiting for its group is written within the renewal period too.
    assert lease.record_window <= lease.renew_every
    # Dead workers' claims are looked for at least twice per lease, even in a long pass.
    assert lease.reclaim_every <= lock_timeout / 2
    # An hour of attempts settles only after any write of it could still land.
    assert lease.settle_after >= lock_timeout + lease.record_window


def test_the_send_deadline_leaves_room_for_two_slow_replies():
    assert Lease(shortest_lock_timeout(30.0), 1.0).send_deadline == 2 * 30.0


def test_the_retry_schedule_from_the_settings_grows_and_stops_at_its_limit():
    retry = Retry.from_config({"RETRY_DELAY": 60, "RETRY_BACKOFF": 2, "RETRY_MAX_DELAY": 300})
    assert [retry.after(n, NOW) - NOW for n in (1, 2, 3, 4)] == [
        timedelta(seconds=s) for s in (60, 120, 240, 300)
    ]
