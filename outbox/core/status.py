"""The message state machine: statuses, allowed moves, the retry schedule and the claim lease."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    DEFERRED = "deferred"
    SENT = "sent"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Statuses a worker may claim from; a message in one of them is "waiting".
CLAIMABLE: tuple[Status, ...] = (Status.QUEUED, Status.DEFERRED)

# Every move the queue makes; outbox.queue.moves checks each one against this table.
MOVES: dict[Status, frozenset[Status]] = {
    Status.QUEUED: frozenset({Status.SENDING, Status.CANCELLED}),
    Status.DEFERRED: frozenset({Status.SENDING, Status.CANCELLED}),
    Status.SENDING: frozenset({Status.SENT, Status.DEFERRED, Status.FAILED, Status.QUEUED}),
    Status.SENT: frozenset(),
    Status.FAILED: frozenset({Status.QUEUED}),
    Status.CANCELLED: frozenset({Status.QUEUED}),
}


class Outcome(StrEnum):
    """What one attempt ended in."""

    SENT = "sent"
    DEFERRED = "deferred"
    FAILED = "failed"
    WORKER_LOST = "worker lost"


def can_move(old: Status, new: Status) -> bool:
    """Whether a message may go from old to new."""
    return new in MOVES[old]


def sources(new: Status) -> tuple[Status, ...]:
    """The statuses from which a message may move to new."""
    return tuple(old for old, targets in MOVES.items() if new in targets)


def retry_delay(attempts: int, delay: float, backoff: float, max_delay: float) -> float:
    """Seconds to wait after the given number of failed attempts (1 for the first)."""
    exponent = max(attempts - 1, 0)
    try:
        seconds = delay * backoff**exponent
    except OverflowError:
        return max_delay
    return min(seconds, max_delay)


def next_attempt_at(
    attempts: int, now: datetime, delay: float, backoff: float, max_delay: float
) -> datetime:
    """When to try again after the given number of failed attempts."""
    return now + timedelta(seconds=retry_delay(attempts, delay, backoff, max_delay))


@dataclass(frozen=True)
class Retry:
    """The retry schedule: RETRY_DELAY, growing by RETRY_BACKOFF, at most RETRY_MAX_DELAY."""

    delay: float  # seconds before the first retry
    backoff: float  # factor per further attempt
    max_delay: float  # seconds, the longest wait

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Retry":
        keys = ("RETRY_DELAY", "RETRY_BACKOFF", "RETRY_MAX_DELAY")
        return cls(*(float(config[key]) for key in keys))

    def after(self, attempts: int, now: datetime) -> datetime:
        """When to try again after the given number of failed attempts."""
        return next_attempt_at(attempts, now, self.delay, self.backoff, self.max_delay)


# How late the send watchdog may fire, as a fraction of the deadline it watches
# (sender.Watchdog looks at its deadline eight times per armed period).
WATCHDOG_LATENESS = 1 / 8


@dataclass(frozen=True)
class Lease:
    """How long a worker's claim on a message lasts, and the timings that keep it inside it.

    A claim (or its last renewal) made at t is taken back by any worker only after
    t + lock_timeout. The worker holding it:
    - renews its claims before a send once renew_every has passed since the last renewal,
      so every send starts before t + renew_every;
    - cuts a send off at send_deadline, which the watchdog notices at most
      WATCHDOG_LATENESS of it late;
    - writes every outcome waiting before it renews, and so before the next send starts.
    The last write therefore starts by t + renew_every + send_deadline * (1 + lateness):
    13/16 of lock_timeout, leaving 3/16 (about 170 s at the default 900 s) for the write
    itself and for clocks that disagree between hosts. Every write is guarded by the claim,
    so one that comes later still changes nothing another worker holds.
    """

    lock_timeout: float  # seconds a claim lasts without renewal
    record_after: float  # seconds an outcome may wait for the rest of its group

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Lease":
        return cls(float(config["LOCK_TIMEOUT"]), float(config["RECORD_AFTER"]))

    @property
    def renew_every(self) -> float:
        """Seconds after a renewal at which a worker renews its claims before sending."""
        return self.lock_timeout / 4

    @property
    def send_deadline(self) -> float:
        """Seconds one mail's send may take before the connection is cut and it is deferred."""
        return self.lock_timeout / 2

    @property
    def record_window(self) -> float:
        """Seconds an outcome waits, at most, for others to be written with it."""
        return min(self.record_after, self.lock_timeout / 8)

    @property
    def reclaim_every(self) -> float:
        """Seconds between two takings-back of dead workers' claims within one long pass."""
        return self.lock_timeout / 2

    @property
    def last_write_by(self) -> float:
        """Seconds after a renewal by which its holder has started its last outcome write."""
        return self.renew_every + self.send_deadline * (1 + WATCHDOG_LATENESS)

    @property
    def settle_after(self) -> float:
        """Seconds after which no attempt finished before then can still be written.

        An attempt's finish time is taken before its write: the write may wait for its
        group, then through a database outage for up to lock_timeout.
        """
        return self.lock_timeout + self.record_after


def shortest_lock_timeout(smtp_timeout: float) -> float:
    """The least LOCK_TIMEOUT for a socket timeout: the send deadline fits two slow replies."""
    return 4 * smtp_timeout
