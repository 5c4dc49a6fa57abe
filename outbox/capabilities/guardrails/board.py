"""What the dashboard and the metrics show of the guardrails: the paused domains and every
rate against its threshold."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric

from outbox.capabilities.guardrails.pauses import listed, rates
from outbox.capabilities.guardrails.rates import KINDS, WINDOWS, Rate
from outbox.models import DomainPause


def gauges() -> Iterator[Metric]:
    """The rates and the pauses as Prometheus gauges, read at each scrape."""
    about = "Each guardrail rate in per cent, by sending domain, stream, kind and window."
    rate = GaugeMetricFamily("outbox_guardrail_rate", about,
                             labels=["domain", "stream", "kind", "window"])  # fmt: skip
    for found in rates():
        labels = [found.domain, found.stream, found.kind, found.window]
        rate.add_metric(labels, found.percent or 0.0)
    yield rate
    about = "1 while a guardrail holds a sending domain's broadcast mail, 0 once resumed."
    paused = GaugeMetricFamily("outbox_domain_paused", about, labels=["domain"])
    for pause in listed():
        paused.add_metric([pause.domain], 1.0 if pause.paused_at is not None else 0.0)
    yield paused


@dataclass(frozen=True)
class Row:
    """One line of the dashboard's table: a domain's stream over one window, a rate a kind."""

    domain: str
    stream: str
    window: str
    rates: tuple[Rate, ...]  # in rates.KINDS order


@dataclass(frozen=True)
class Board:
    """What the dashboard shows: the paused domains and every rate against its threshold."""

    paused: list[DomainPause]
    rows: list[Row]


def board(now: datetime | None = None) -> Board:
    """The dashboard's read: two small queries."""
    found = rates(now)
    keys = sorted({(r.domain, r.stream, r.window) for r in found}, key=_row_order)
    by_key: dict[tuple[str, str, str], list[Rate]] = {key: [] for key in keys}
    for rate in found:
        by_key[(rate.domain, rate.stream, rate.window)].append(rate)
    rows = [Row(*key, tuple(sorted(by_key[key], key=lambda r: KINDS.index(r.kind))))
            for key in keys]  # fmt: skip
    return Board([p for p in listed() if p.paused_at is not None], rows)


def _row_order(key: tuple[str, str, str]) -> tuple[str, str, int]:
    domain, stream, window = key
    return domain, stream, list(WINDOWS).index(window)
