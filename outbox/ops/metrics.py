"""Prometheus metrics: counters kept by the app and the workers, gauges read at scrape, /metrics.

Several processes (gunicorn's workers, `outbox worker --processes N`) each count on their
own. With PROMETHEUS_MULTIPROC_DIR set in their environment before they start, every
process writes its counts to files there and /metrics adds up all of them; without it
each process has its own registry and /metrics shows that process's counts only. The
directory must be emptied whenever the processes all start afresh (docs: operating/metrics.md).
"""

import bisect
import hmac
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from flask import Blueprint, Flask, Response, current_app, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from outbox.core.latency import queue_to_sent
from outbox.core.status import Outcome, Status
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.models import utcnow
from outbox.ops import heartbeats, reports

if TYPE_CHECKING:
    from outbox import queue

bp = Blueprint("metrics", __name__)
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

ENQUEUED = Counter("outbox_messages_enqueued", "Messages stored for sending, by where from "
                   "(api, compose).", ["source"])  # fmt: skip
STREAM_ENQUEUED = Counter("outbox_stream_enqueued", "Messages stored for sending, by stream "
                          "(transactional, broadcast).", ["stream"])  # fmt: skip
ATTEMPTS = Counter("outbox_attempts", "Send attempts recorded, by outcome (sent, deferred, "
                   "failed, worker_lost).", ["outcome"])  # fmt: skip
STREAM_ATTEMPTS = Counter("outbox_stream_attempts", "Send attempts recorded, by stream "
                          "(transactional, broadcast) and outcome (sent, deferred, failed).",
                          ["stream", "outcome"])  # fmt: skip
REPLIES = Counter("outbox_smtp_replies", "SMTP replies that ended an attempt, by class "
                  "(2xx, 4xx, 5xx).", ["code_class"])  # fmt: skip
SEND_SECONDS = Histogram(
    "outbox_send_seconds", "Time from handing a message to SMTP to its reply.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)  # fmt: skip
QUEUE_DELAY = Histogram(
    "outbox_queue_delay_seconds", "Time from a message's due time to its handing to SMTP.",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400),
)  # fmt: skip
QUEUED_TO_SENT = Histogram(
    "outbox_queued_to_sent_seconds", "Time from storing a message to the SMTP server's 250 "
    "for it (retries and send_after waits included), of each message sent, by stream.",
    ["stream"], buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)  # fmt: skip
HTTP_REQUESTS = Counter("outbox_http_requests", "HTTP requests answered, by Flask endpoint "
                        "and status.", ["endpoint", "status"])  # fmt: skip
HTTP_SECONDS = Histogram(
    "outbox_http_request_seconds", "Time to answer an HTTP request, by endpoint and status.",
    ["endpoint", "status"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)  # fmt: skip


# --- throttling ---
THROTTLED = Counter("outbox_messages_throttled", "Claimed messages held back for a rate limit "
                    "(not an attempt), by the kind of bucket they wait for (route, domain).",
                    ["kind"])  # fmt: skip


def count_held(kinds: Iterable[str]) -> None:
    """Messages a worker held back for a rate limit, by the kind of bucket: one inc per kind."""
    tally: dict[str, int] = {}
    for kind in kinds:
        tally[kind] = tally.get(kind, 0) + 1
    for kind, count in tally.items():
        THROTTLED.labels(kind).inc(count)


def count_enqueued(source: str, count: int = 1, streams: Mapping[str, int] | None = None) -> None:
    """Messages newly stored (not an idempotent repeat) from source: api or compose; streams:
    how many were of each stream (None: all of the default one)."""
    ENQUEUED.labels(source).inc(count)
    for stream, many in (streams or {DEFAULT_STREAM.value: count}).items():
        STREAM_ENQUEUED.labels(stream).inc(many)


def count_outcomes(outcomes: Iterable[str], codes: Iterable[int | None]) -> None:
    """One recorded group's attempts: one inc per outcome and reply class, not per message."""
    tally: dict[str, int] = {}
    for outcome in outcomes:
        tally[outcome] = tally.get(outcome, 0) + 1
    for outcome, count in tally.items():
        ATTEMPTS.labels(outcome).inc(count)
    classes: dict[str, int] = {}
    for code in codes:
        if code is not None and 200 <= code < 600:
            name = f"{code // 100}xx"
            classes[name] = classes.get(name, 0) + 1
    for name, count in classes.items():
        REPLIES.labels(name).inc(count)


def count_recorded(
    finished: "Sequence[queue.Finished]", recorded: dict[int, Status], delays: list[float]
) -> None:
    """A recorded group of a worker's outcomes, and the queue delays gathered since; empties delays.

    The reply that ended an attempt the server answered: 250 at the final dot if sent,
    else the refusal's code; a lost connection or a timeout has none.
    """
    done = [d for d in finished if d.claim.id in recorded]
    replied = [(d, 250 if d.outcome is Outcome.SENT else d.code) for d in done]
    replied = [(d, code) for d, code in replied if code]
    count_outcomes([recorded[d.claim.id].value for d in done], [code for _, code in replied])
    by_stream: dict[tuple[str, str], int] = {}
    for d in done:
        key = (d.claim.stream, recorded[d.claim.id].value)
        by_stream[key] = by_stream.get(key, 0) + 1
    for (stream, outcome), count in by_stream.items():
        STREAM_ATTEMPTS.labels(stream, outcome).inc(count)
    observe_send([(d.finished_at - d.claim.started_at).total_seconds() for d, _ in replied], delays)
    delays.clear()
    took: dict[str, list[float]] = {}
    for d in done:
        seconds = queue_to_sent(d.queued_at, d.finished_at)
        if recorded[d.claim.id] is Status.SENT and seconds is not None:
            took.setdefault(d.claim.stream, []).append(seconds)
    for stream, waits in took.items():
        observe_many(QUEUED_TO_SENT.labels(stream), waits)


def observe_send(send_seconds: Sequence[float], delays: Sequence[float]) -> None:
    """The send times and queue delays of a group: one write per bucket used, not per value."""
    observe_many(SEND_SECONDS, send_seconds)
    observe_many(QUEUE_DELAY, [max(seconds, 0.0) for seconds in delays])


def observe_many(histogram: Histogram, values: Sequence[float]) -> None:
    """histogram.observe() for each value, in a few writes: a bucket's count once, the sum once.

    In multiprocess mode every write is one to a memory-mapped file (~1 µs): a group of
    100 sends observed one by one cost 2 µs a message. Histogram's own fields are used;
    tests/e2e/test_metrics.py holds the result to observe()'s, and a prometheus-client
    without them gets observe() one by one.
    """
    if not values:
        return
    bounds, buckets = (
        getattr(histogram, "_upper_bounds", None),
        getattr(histogram, "_buckets", None),
    )
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None:
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1  # the first bound >= value, as observe
    for bucket, count in zip(buckets, counts, strict=True):
        if count:
            bucket.inc(count)
    total.inc(sum(values))


GAUGES = "outbox.ops.metrics.gauges"  # the app's further gauges (on_scrape), in app.extensions


def on_scrape(app: Flask, collect: Callable[[], Iterable[Metric]]) -> None:
    """Have collect add gauges of its own, read at each scrape (a capability's)."""
    app.extensions.setdefault(GAUGES, []).append(collect)


def init_app(app: Flask) -> None:
    """Time every request, and serve /metrics."""
    app.before_request(_start_timer)
    app.after_request(_count_request)
    app.register_blueprint(bp)


def _start_timer() -> None:
    g.metrics_started = time.perf_counter()


def _count_request(response: Response) -> Response:
    started = g.pop("metrics_started", None)
    if started is not None:
        # The endpoint's name, never the path: /api/messages/<id> is one series, not a million.
        endpoint = request.endpoint or "none"
        status = str(response.status_code)
        HTTP_REQUESTS.labels(endpoint, status).inc()
        HTTP_SECONDS.labels(endpoint, status).observe(time.perf_counter() - started)
    return response


@bp.get("/metrics")
def scrape() -> Response:
    """The metrics in Prometheus' text format, for a bearer of METRICS_TOKEN; else 404/401."""
    wanted = current_app.config["METRICS_TOKEN"]
    if not wanted:
        # Not served: nothing tells a stranger there is anything here. Plain text: the
        # error page would want a session for its CSRF token.
        return Response("not found\n", 404, mimetype="text/plain")
    given = request.headers.get("Authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), wanted):
        return Response("a bearer token is needed\n", 401, {"WWW-Authenticate": "Bearer"},
                        mimetype="text/plain")  # fmt: skip
    return Response(exposition(), mimetype=CONTENT_TYPE_LATEST)


def exposition() -> bytes:
    """Every process's counters (or this one's) and the queue's gauges, read now."""
    path = os.environ.get(MULTIPROC_DIR)
    if path:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=path)
        counters = generate_latest(registry)
    else:
        counters = generate_latest(REGISTRY)
    gauges = CollectorRegistry(auto_describe=False)
    gauges.register(QueueGauges())
    return counters + generate_latest(gauges)


class QueueGauges:
    """Gauges read from the database at each scrape: status counts, the wait, the workers."""

    def collect(self) -> Iterator[Metric]:
        now = utcnow()
        about = "Messages in each status (counted in full by a worker past 1,000)."
        messages = GaugeMetricFamily("outbox_messages", about, labels=["status"])
        for status, count in reports.status_counts().items():
            messages.add_metric([status], count.value)
        yield messages
        oldest = reports.oldest_waiting(now)
        wait = 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
        about = "How long the longest-waiting due message has waited; 0 if none is due."
        yield GaugeMetricFamily("outbox_oldest_due_seconds", about, value=wait)
        seen = GaugeMetricFamily("outbox_worker_last_seen_timestamp_seconds", "Each worker's "
                                 "last heartbeat (seen within a day), Unix time.",
                                 labels=["worker"])  # fmt: skip
        for beat in heartbeats.recent(now):
            seen.add_metric([beat.worker_id], _unix(beat.last_seen_at))
        yield seen
        for collect in current_app.extensions.get(GAUGES, ()):
            yield from collect()


def _unix(moment: datetime) -> float:
    """A stored UTC time (naive) as Unix time."""
    return moment.replace(tzinfo=UTC).timestamp()
