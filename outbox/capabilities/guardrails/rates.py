"""The guardrails' arithmetic: counts summed over a window, the rates they give, and whether
one is over its threshold (no database, no app)."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

BOUNCES, COMPLAINTS, REFUSALS = "bounces", "complaints", "refusals"
# In the order a trip names the first found over: the rate providers weigh most first.
KINDS = (COMPLAINTS, BOUNCES, REFUSALS)
# The windows, each ending with the current hour, the shorter first.
WINDOWS: dict[str, timedelta] = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}


@dataclass(frozen=True)
class Counts:
    """Recipients of one sending domain's mail in one stream: sent (taken by the server),
    refused for good at SMTP, and of the sent ones, bounced later and complained of."""

    sent: int = 0
    refused: int = 0
    bounced: int = 0
    complained: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def fractions(self) -> dict[str, tuple[int, int]]:
        """Each kind's count over the recipients it is a share of.

        Bounces and complaints are of mail a server took; a refusal is of mail offered,
        so its share is of the recipients tried (sent or refused).
        """
        return {COMPLAINTS: (self.complained, self.sent), BOUNCES: (self.bounced, self.sent),
                REFUSALS: (self.refused, self.sent + self.refused)}  # fmt: skip


@dataclass(frozen=True)
class Thresholds:
    """The per cent over which each kind pauses, and the recipients a window needs first."""

    bounces: float = 5.0
    complaints: float = 0.3
    refusals: float = 10.0
    minimum: int = 100

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Thresholds":
        return cls(
            config["GUARDRAIL_BOUNCE_RATE"],
            config["GUARDRAIL_COMPLAINT_RATE"],
            config["GUARDRAIL_REFUSAL_RATE"],
            config["GUARDRAIL_MIN_RECIPIENTS"],
        )

    def of(self, kind: str) -> float:
        return float(getattr(self, kind))


@dataclass(frozen=True)
class Rate:
    """One kind's rate of one domain and stream over one window, against its threshold."""

    domain: str
    stream: str
    kind: str
    window: str
    count: int
    recipients: int  # what count is a share of
    threshold: float  # per cent
    minimum: int

    @property
    def percent(self) -> float | None:
        """The rate in per cent; None with no recipients."""
        return 100.0 * self.count / self.recipients if self.recipients else None

    @property
    def counts(self) -> bool:
        """Whether the window holds enough recipients for the rate to pause anything."""
        return self.recipients >= self.minimum

    @property
    def over(self) -> bool:
        """The tripping rule: enough recipients, and a rate strictly above the threshold."""
        percent = self.percent
        return self.counts and percent is not None and percent > self.threshold

    def reason(self) -> str:
        """The trip in words, for the page, the log and the event."""
        return (f"{self.kind} {self.percent or 0:.2f}% of {self.recipients} recipients of "
                f"{self.stream} mail in the last {self.window}, over the threshold of "
                f"{self.threshold:g}%")  # fmt: skip


def hour_of(moment: datetime) -> datetime:
    """The start of moment's hour: the bucket its outcomes are counted in."""
    return moment.replace(minute=0, second=0, microsecond=0)


def window_start(now: datetime, window: str) -> datetime:
    """The first hour a window ending with now's hour holds (24h: the current hour and the
    23 before it)."""
    return hour_of(now) - WINDOWS[window] + timedelta(hours=1)


def first_hour(now: datetime) -> datetime:
    """The first hour the longest window holds."""
    return min(window_start(now, window) for window in WINDOWS)


Hour = tuple[datetime, str, str, Counts]  # hour_at, domain, stream, counts


def windowed(
    hours: Iterable[Hour], now: datetime, counts_from: Mapping[str, datetime] | None = None
) -> dict[tuple[str, str, str], Counts]:
    """The counts per domain, stream and window; counts_from: a resumed domain's hours before
    this are left out."""
    since = {window: window_start(now, window) for window in WINDOWS}
    found: dict[tuple[str, str, str], Counts] = {}
    for hour_at, domain, stream, counts in hours:
        floor = (counts_from or {}).get(domain)
        if floor is not None and hour_at < floor:
            continue
        for window, start in since.items():
            if hour_at >= start:
                key = (domain, stream, window)
                found[key] = found.get(key, Counts()) + counts
    return found


def judged(counts: Mapping[tuple[str, str, str], Counts], thresholds: Thresholds) -> list[Rate]:
    """Every rate of the counts, by domain, stream, window and kind."""
    return [Rate(domain, stream, kind, window, count, recipients, thresholds.of(kind),
                 thresholds.minimum)
            for (domain, stream, window), found in sorted(counts.items())
            for kind, (count, recipients) in found.fractions().items()]  # fmt: skip


def tripped(rates: Iterable[Rate]) -> dict[str, Rate]:
    """Each domain with a rate over its threshold, and the rate that names it: complaints
    before bounces before refusals, the shorter window first."""
    order = {kind: n for n, kind in enumerate(KINDS)}
    spans = {window: n for n, window in enumerate(WINDOWS)}
    found: dict[str, Rate] = {}
    for rate in sorted(rates, key=lambda r: (order[r.kind], spans[r.window], r.stream)):
        if rate.over and rate.domain not in found:
            found[rate.domain] = rate
    return found
