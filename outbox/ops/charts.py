"""The dashboard's live reads per stream: throughput and queue-to-250 over a window, the
last day's failures by reason and recipient domain, and what each worker has in hand.

Each costs the same whatever the messages table holds: settled hours come from
stream_hours (rollups.roll_up_stream_hours), the rest is a capped range of an index.
"""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select

from outbox.core import charts
from outbox.core.charts import Bucket, Chart, Window
from outbox.core.recipients import State
from outbox.core.status import Status
from outbox.core.streams import Stream
from outbox.models import Message, StreamHour, utcnow
from outbox.models.db import db
from outbox.ops import rollups

# The most messages a chart counts one by one (those not in stream_hours yet: the last
# hour or two, or a whole window before the workers first counted it). Past it the
# oldest buckets show less than they held, and the chart says so.
LIVE_CAP = 20_000
FAILURE_SPAN = timedelta(hours=24)
# The failures the groups are made of at most: the latest, a bounded read however many
# failed in a day.
FAILURE_SAMPLE = 1_000
TOP = 5  # reasons and domains shown
IN_HAND_CAP = 1_000  # messages being sent that are counted per worker


@dataclass(frozen=True)
class Charts:
    """A chart per stream over one window, and whether its live part was capped."""

    window: Window
    charts: list[Chart]
    capped: bool


def _kept(first: datetime, settled: datetime) -> dict[tuple[datetime, str], Bucket]:
    stmt = select(StreamHour).where(StreamHour.hour_at >= first, StreamHour.hour_at < settled)
    found = {}
    for row in db.session.scalars(stmt):
        p50 = None if row.p50_ms is None else row.p50_ms / 1000
        p95 = None if row.p95_ms is None else row.p95_ms / 1000
        found[(row.hour_at, row.stream)] = Bucket(row.hour_at, row.sent, row.failed, p50, p95)
    return found


def per_stream(w: Window, now: datetime | None = None) -> Charts:
    """Sent and failed messages and the queue-to-250 of those sent, per bucket of the
    window, for every stream (core.streams), oldest bucket first."""
    now = now or utcnow()
    starts = charts.starts(w, now)
    kept: dict[tuple[datetime, str], Bucket] = {}
    live_from = starts[0]
    if w.bucket == timedelta(hours=1):
        kept = _kept(starts[0], rollups.settled_before(now))
        counted = {hour for hour, _ in kept}
        live_from = min((s for s in starts if s not in counted), default=starts[-1])
    found, capped = rollups.ended(live_from, cap=LIVE_CAP)
    made = []
    for stream in Stream:
        mine = (outcome for name, outcome in found if name == stream.value)
        live = charts.tally(mine, live_from, w.bucket)
        buckets = [kept.get((s, stream.value)) or live.get(s) or Bucket(s) for s in starts]
        made.append(Chart(stream.value, w, buckets))
    return Charts(w, made, capped)


@dataclass(frozen=True)
class Failures:
    """The latest failures of the last day grouped by reason and by recipient domain."""

    reasons: list[tuple[str, int]]
    domains: list[tuple[str, int]]
    count: int  # the failures they are of
    capped: bool  # more failed: the groups are of the latest `count`


def failures(now: datetime | None = None, top: int = TOP) -> Failures:
    """The last day's failed messages (the latest FAILURE_SAMPLE) by reason
    (charts.reason: reply code and enhanced code) and by the domains of the recipients
    that failed (all of the message's, when none is marked failed on its own)."""
    now = now or utcnow()
    stmt = (
        select(Message.last_error, Message.recipients)
        .where(Message.settled_at >= now - FAILURE_SPAN, Message.status == Status.FAILED.value)
        .order_by(Message.settled_at.desc())
        .limit(FAILURE_SAMPLE + 1)
    )
    rows = db.session.execute(stmt).all()
    db.session.commit()
    reasons: Counter[str] = Counter()
    domains: Counter[str] = Counter()
    for error, recipients in rows[:FAILURE_SAMPLE]:
        reasons[charts.reason(error)] += 1
        failed = [r for r in recipients or [] if r.state == State.FAILED] or recipients or []
        for name in {charts.domain(r.address) for r in failed}:
            domains[name] += 1
    count = min(len(rows), FAILURE_SAMPLE)
    return Failures(charts.top(reasons, top), charts.top(domains, top), count,
                    len(rows) > FAILURE_SAMPLE)  # fmt: skip


def in_hand(cap: int = IN_HAND_CAP) -> dict[str, dict[str, int]]:
    """Messages being sent now per worker and stream: a range of ix_messages_status_id."""
    sending = (
        select(Message.locked_by, Message.stream)
        .where(Message.status == Status.SENDING.value)
        .limit(cap)
        .subquery()
    )
    stmt = select(sending.c.locked_by, sending.c.stream, func.count()).group_by(
        sending.c.locked_by, sending.c.stream
    )
    found: dict[str, dict[str, int]] = {}
    for worker, stream, number in db.session.execute(stmt):
        found.setdefault(worker or "", {})[stream] = int(number)
    db.session.commit()
    return found


def end_reads() -> None:
    """End the read transaction, so that the next read sees what was written since (a
    long-lived answer, the live events, reads again and again)."""
    db.session.commit()
