"""The message state machine: statuses, allowed moves and the retry schedule."""

from datetime import datetime, timedelta
from enum import StrEnum


class Status(StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    DEFERRED = "deferred"
    SENT = "sent"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Statuses a worker may claim from; a message in one of them is "waiting".
CLAIMABLE: tuple[Status, ...] = (Status.QUEUED, Status.DEFERRED)

# Every move the queue makes; queue.py checks each one against this table.
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
