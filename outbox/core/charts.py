"""The dashboard's charts and tallies: the windows a chart can show, the buckets they are
cut into, the sent and failed messages and their queue-to-250 per bucket, and failures
grouped by reason and by recipient domain."""

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from outbox.core.latency import quantile

SENT, FAILED = "sent", "failed"


@dataclass(frozen=True)
class Window:
    """A span a chart shows, ending now, cut into equal buckets."""

    key: str  # as the URL names it: ?window=24h
    label: str
    span: timedelta
    bucket: timedelta

    @property
    def buckets(self) -> int:
        return int(self.span / self.bucket)


WINDOWS = {
    w.key: w
    for w in (
        Window("1h", "1 hour", timedelta(hours=1), timedelta(minutes=5)),
        Window("24h", "24 hours", timedelta(hours=24), timedelta(hours=1)),
        Window("7d", "7 days", timedelta(days=7), timedelta(hours=1)),
    )
}
DEFAULT_WINDOW = WINDOWS["24h"]


def window(key: object) -> Window:
    """The window a URL names; the default for none or one not known."""
    return WINDOWS.get(key, DEFAULT_WINDOW) if isinstance(key, str) else DEFAULT_WINDOW


def floor(moment: datetime, size: timedelta) -> datetime:
    """The start of the bucket of that size (a divisor of a day) that moment falls in."""
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day + ((moment - day) // size) * size


def starts(w: Window, now: datetime) -> list[datetime]:
    """The starts of the window's buckets, oldest first, the one now is in last."""
    last = floor(now, w.bucket)
    return [last - n * w.bucket for n in range(w.buckets - 1, -1, -1)]


@dataclass(frozen=True)
class Bucket:
    """Messages that ended sent or failed in one bucket, and the queue-to-250 of those sent."""

    start: datetime
    sent: int = 0
    failed: int = 0
    p50: float | None = None  # seconds
    p95: float | None = None


@dataclass(frozen=True)
class Outcome:
    """One message that ended: when, how, and (if sent) how long it waited in seconds."""

    at: datetime
    status: str  # SENT or FAILED
    wait: float | None = None


def tally(outcomes: Iterable[Outcome], start: datetime, size: timedelta) -> dict[datetime, Bucket]:
    """Outcomes from start on, per bucket of size: counts and the p50/p95 of the waits."""
    sent: dict[datetime, int] = Counter()
    failed: dict[datetime, int] = Counter()
    waits: dict[datetime, list[float]] = {}
    for outcome in outcomes:
        if outcome.at < start:
            continue
        at = floor(outcome.at, size)
        if outcome.status == SENT:
            sent[at] += 1
            if outcome.wait is not None:
                waits.setdefault(at, []).append(outcome.wait)
        elif outcome.status == FAILED:
            failed[at] += 1
    return {
        at: Bucket(at, sent[at], failed[at], quantile(waits.get(at, []), 0.5),
                   quantile(waits.get(at, []), 0.95))
        for at in set(sent) | set(failed)
    }  # fmt: skip


@dataclass(frozen=True)
class Chart:
    """One stream's buckets over a window, with the highest figures to scale them by."""

    stream: str
    window: Window
    buckets: list[Bucket]

    @property
    def sent(self) -> int:
        return sum(b.sent for b in self.buckets)

    @property
    def failed(self) -> int:
        return sum(b.failed for b in self.buckets)

    @property
    def peak(self) -> int:
        """The most messages of one bucket, sent or failed (at least 1, to scale by)."""
        return max((max(b.sent, b.failed) for b in self.buckets), default=0) or 1

    @property
    def slowest(self) -> float:
        """The highest p95 of a bucket in seconds (at least 1, to scale by)."""
        return max((b.p95 for b in self.buckets if b.p95 is not None), default=0.0) or 1.0

    @property
    def timed(self) -> bool:
        """Whether any bucket has a queue-to-250 to draw."""
        return any(b.p50 is not None for b in self.buckets)

    def line(self, quantile: str, left: float, width: float, height: float) -> str:
        """The points of an SVG polyline of a quantile ("p50", "p95") across the buckets
        that have one, each at its bucket's middle, scaled so the slowest p95 is at the top."""
        step = width / len(self.buckets)
        points = []
        for n, b in enumerate(self.buckets):
            value = getattr(b, quantile)
            if value is not None:
                x = left + (n + 0.5) * step
                points.append(f"{x:.1f},{height - value * height / self.slowest:.1f}")
        return " ".join(points)


# A reply code at the start of an error, and an enhanced status code (RFC 3463) after it.
REPLY = re.compile(r"\b([245]\d\d)[ -]+(?:([245]\.\d{1,3}\.\d{1,3})\b)?")
ENHANCED = re.compile(r"\b([245]\.\d{1,3}\.\d{1,3})\b")
REASON_CHARS = 60  # of an error with no code, what names its group


def reason(error: str | None) -> str:
    """The group a failure's error falls in: its reply code and enhanced status code
    ("550 5.1.1"), either alone, or for an error with neither, its words up to a colon.

    The rest of a server's text (queue ids, addresses) differs from one refusal to the
    next; the codes say what went wrong.
    """
    text = (error or "").strip()
    if not text:
        return "no error recorded"
    found = REPLY.search(text)
    if found:
        enhanced = found.group(2) or _enhanced(text)
        return f"{found.group(1)} {enhanced}" if enhanced else found.group(1)
    enhanced = _enhanced(text)
    if enhanced:
        return enhanced
    return text.split(":", 1)[0].strip()[:REASON_CHARS] or "no error recorded"


def error_term(group: str) -> str:
    """What the outbox list's error filter looks for to find a reason's failures: its
    enhanced code where it has one (written the same in every server's text), else the
    group as it reads."""
    return _enhanced(group) or group


def _enhanced(text: str) -> str | None:
    found = ENHANCED.search(text)
    return found.group(1) if found else None


def domain(address: str) -> str:
    """The domain of an address, lower case; the address itself if it has none."""
    return address.rpartition("@")[2].strip().lower() or address


def top(counts: Counter[str], n: int) -> list[tuple[str, int]]:
    """The n largest counts, largest first; ties by name, so the order is stable."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
