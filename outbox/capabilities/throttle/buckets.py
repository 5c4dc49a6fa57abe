"""A token bucket's arithmetic, with the time passed in: refill, take, slow down, recover.

Pure: no database. outbox.throttle.taking reads a bucket's row under a lock, runs these
and writes the row back in the same transaction.

The size (burst) is a fifth of a second of sending, at least one mail: max(1, rate / 5).
A worker takes the tokens of a whole batch at once and then sends them one after the
other, so a burst of a fifth of a second keeps what it sends close to when it was let
through, while an idle domain still gets its first mails at once; the one mail minimum
lets a rate under 5 a second send at all. Over any span of time the mails let through
for a bucket never exceed burst + rate * span: each refill adds at most rate * (time
passed), the bucket never holds more than burst, and the time only moves forward.
"""

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

BURST_SECONDS = 0.2  # the bucket holds this many seconds of sending (at least one mail)
SLOW_DOWN = 0.5  # a 421 or 4.7.x multiplies the rate by this
MIN_FACTOR = 1 / 16  # the slowest a domain is slowed to, as a fraction of its rate
SLOW_DOWN_GAP = 5.0  # seconds: replies within this of a slow-down do not slow it again
RECOVER_EVERY = 60.0  # seconds without a slow-down before each step back up
RECOVER_STEP = 1.25  # each step multiplies the factor by this, up to 1
REASON_CHARS = 500
# Messages held back are given turns at most this far ahead (a backlog of a day is not
# booked a day ahead); those beyond come back within a second MAX_HOLD and are held again.
MAX_HOLD = timedelta(minutes=5)


def burst_of(rate: float) -> float:
    """The bucket's size at a rate: a fifth of a second of sending, at least one mail."""
    return max(1.0, rate * BURST_SECONDS)


@dataclass
class Bucket:
    """One bucket's state, as its row holds it."""

    name: str
    rate: float  # mails a second as configured
    tokens: float
    updated_at: datetime
    factor: float = 1.0
    slowed_at: datetime | None = None
    reason: str | None = None
    held_until: datetime | None = None

    @classmethod
    def full(cls, name: str, rate: float, now: datetime) -> "Bucket":
        """A new bucket, full."""
        return cls(name, rate, burst_of(rate), now)

    @property
    def burst(self) -> float:
        return burst_of(self.rate)

    def factor_at(self, now: datetime) -> float:
        """The slow-down in force at now: the last one, stepped back up once per RECOVER_EVERY."""
        if self.factor >= 1 or self.slowed_at is None:
            return 1.0
        steps = max(0.0, (now - self.slowed_at).total_seconds()) // RECOVER_EVERY
        return min(1.0, self.factor * RECOVER_STEP ** min(steps, 64))

    def rate_at(self, now: datetime) -> float:
        """Mails a second let through at now."""
        return self.rate * self.factor_at(now)

    def refill(self, now: datetime) -> None:
        """Add the tokens earned since updated_at (never more than the bucket holds).

        A now before updated_at (another host's clock ahead of this one's) adds nothing
        and keeps updated_at: the time the bucket has counted only moves forward.
        """
        elapsed = (now - self.updated_at).total_seconds()
        if elapsed <= 0:
            return
        rate = self.rate_at(now)
        self.tokens = min(max(1.0, rate * BURST_SECONDS), self.tokens + rate * elapsed)
        self.updated_at = now

    def take(self) -> bool:
        """Take one mail's token if there is one (refill first)."""
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def turns(self, count: int, now: datetime) -> list[datetime]:
        """When count messages held back for this bucket may come back, one per token.

        The first when the next token comes (or after those held back before, held_until),
        then one every 1/rate; held_until moves on past them. Those whose turn is further
        than MAX_HOLD ahead come back somewhere in the MAX_HOLD after it, at random (not
        all at once), and are looked at again.
        """
        interval = 1.0 / max(self.rate_at(now), 1e-6)
        first = now + timedelta(seconds=max(0.0, 1 - self.tokens) * interval)
        if self.held_until is not None and self.held_until > first:
            first = self.held_until
        latest = now + MAX_HOLD
        times = [first + timedelta(seconds=n * interval) for n in range(count)]
        self.held_until = min(first + timedelta(seconds=count * interval), latest)
        return [t if t <= latest else _beyond(latest) for t in times]

    def slow_down(self, now: datetime, reason: str) -> bool:
        """Halve the rate (down to MIN_FACTOR of it) for reason; False if just slowed.

        Replies to mails sent before a slow-down took effect come in after it: within
        SLOW_DOWN_GAP of the last one they do not halve the rate again.
        """
        if self.slowed_at is not None and now - self.slowed_at < timedelta(seconds=SLOW_DOWN_GAP):
            if self.factor < 1:
                return False
        self.refill(now)  # the tokens earned so far, at the rate that held until now
        self.factor = max(MIN_FACTOR, self.factor_at(now) * SLOW_DOWN)
        self.slowed_at, self.reason = now, reason[:REASON_CHARS]
        self.tokens = min(self.tokens, max(1.0, self.rate_at(now) * BURST_SECONDS))
        return True

    def slowed(self, now: datetime) -> bool:
        """Whether a slow-down still holds at now."""
        return self.factor_at(now) < 1

    def holding(self, now: datetime) -> bool:
        """Whether messages held back for this bucket are still waiting for their turn."""
        return self.held_until is not None and self.held_until > now


def _beyond(latest: datetime) -> datetime:
    """A time in the MAX_HOLD after latest, at random: spread, not one instant for all."""
    return latest + MAX_HOLD * random.random()
