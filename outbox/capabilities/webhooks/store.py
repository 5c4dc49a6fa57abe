"""The deliveries' rows: claimed like messages, outcomes written under the claim, sent again,
tested, listed and purged. (outbox.events writes new ones.)"""

import functools
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Executable, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError

from outbox.capabilities.webhooks import events
from outbox.capabilities.webhooks.post import Answer
from outbox.models import WebhookDelivery, utcnow
from outbox.models.db import db
from outbox.models.webhooks import RESPONSE_CHARS
from outbox.queue.claims import retryable, with_retries

DELIVERIES = events.DELIVERIES
ENDPOINTS = events.ENDPOINTS
PENDING, SENDING, DELIVERED, FAILED = "pending", "sending", "delivered", "failed"
STATUSES = (PENDING, SENDING, DELIVERED, FAILED)
# Seconds before each retry of a failed delivery; after the last, it fails for good and
# its endpoint is disabled (about 42 hours from the first try).
RETRIES = (5, 300, 1800, 7200, 18000, 36000, 36000, 50400)
PAGE = 50  # deliveries on one page of an endpoint's list
IN_FLIGHT = 4  # deliveries to one endpoint sending at once, a thread and a socket each


def lease(timeout: float) -> float:
    """Seconds a worker's claim on deliveries holds before any worker may take it back.

    A run sends its whole claim at once, every request ended by timeout (post.Cutoff;
    only the system resolver's own limits bound a name's lookup), and writes the
    outcomes next: three times timeout leaves twice the requests' time for that. A
    claim taken back is sent again by another worker and the first one's late outcome is
    not written (record's WHERE names the claim): at least once, never lost; receivers
    dedupe on webhook-id, which a retry keeps.
    """
    return 3 * timeout + 5


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker holds, with what its request needs."""

    id: int
    endpoint_id: int
    url: str
    secret: str
    event_id: str
    payload: str
    attempts: int


def claim(worker_id: str, limit: int, now: datetime | None = None,
          in_flight: int = IN_FLIGHT) -> list[Claimed]:  # fmt: skip
    """Mark up to limit due deliveries of enabled endpoints as sending by this worker, at
    most in_flight of one endpoint's sending at once."""

    def step() -> list[Claimed]:
        claimed = _claim(worker_id, limit, now or utcnow(), in_flight)
        db.session.commit()
        return claimed

    return with_retries(step)


def _claim(worker_id: str, limit: int, now: datetime, in_flight: int) -> list[Claimed]:
    e = ENDPOINTS.c
    found = db.session.execute(select(e.id, e.url, e.secret).where(e.enabled.is_(True))).all()
    endpoints = {row.id: row for row in found}
    room = _room(list(endpoints), in_flight)
    order = list(room)
    random.shuffle(order)  # no endpoint's backlog always goes first
    rows: list[Any] = []
    for endpoint_id in order:
        if len(rows) >= limit:
            break
        rows += _take(worker_id, endpoint_id, min(room[endpoint_id], limit - len(rows)), now)
    return [Claimed(row.id, row.endpoint_id, endpoints[row.endpoint_id].url,
                    endpoints[row.endpoint_id].secret, row.event_id, row.payload, row.attempts)
            for row in sorted(rows, key=lambda row: row.id)]  # fmt: skip


def _room(endpoint_ids: list[int], in_flight: int) -> dict[int, int]:
    """How many more deliveries each endpoint may have in flight, for those that may.

    Counted across workers; two claims at the same moment may together pass it, by at
    most a claim's worth. A slow receiver so holds a few threads, not a batch.
    """
    if not endpoint_ids:
        return {}
    d = DELIVERIES.c
    stmt = select(d.endpoint_id, func.count()).where(
        d.status == SENDING, d.endpoint_id.in_(endpoint_ids)).group_by(d.endpoint_id)  # fmt: skip
    busy: dict[int, int] = {row[0]: row[1] for row in db.session.execute(stmt)}
    room = {endpoint: in_flight - busy.get(endpoint, 0) for endpoint in endpoint_ids}
    return {endpoint: free for endpoint, free in room.items() if free > 0}


def _take(worker_id: str, endpoint_id: int, limit: int, now: datetime) -> list[Any]:
    """Mark up to limit of one endpoint's due deliveries as sending by this worker."""
    d = DELIVERIES.c
    due = select(d.id, d.endpoint_id, d.event_id, d.payload, d.attempts).where(
        d.status == PENDING, d.next_attempt_at <= now, d.endpoint_id == endpoint_id
    ).order_by(d.next_attempt_at, d.id).limit(limit)  # fmt: skip
    values = {"status": SENDING, "locked_by": worker_id, "locked_at": now}
    if db.engine.dialect.name == "sqlite":
        # No row locks: one UPDATE under SQLite's write lock chooses and marks at once.
        chosen = due.with_only_columns(d.id).scalar_subquery()
        stmt = update(DELIVERIES).where(d.id.in_(chosen), d.status == PENDING).values(values)
        return list(db.session.execute(stmt.returning(*due.selected_columns)))
    # SKIP LOCKED: workers take disjoint rows without waiting on each other.
    rows = list(db.session.execute(due.with_for_update(skip_locked=True)))
    if rows:
        ids = [row.id for row in rows]
        db.session.execute(update(DELIVERIES).where(d.id.in_(ids)).values(values))
    return rows


def release_stale(lease_seconds: float, now: datetime | None = None) -> int:
    """Put deliveries whose claim is older than the lease back to pending: their worker died."""
    now = now or utcnow()
    d = DELIVERIES.c
    stmt = update(DELIVERIES).where(
        d.status == SENDING, d.locked_at < now - timedelta(seconds=lease_seconds)
    ).values(status=PENDING, locked_by=None, locked_at=None, next_attempt_at=now,
             error=f"worker lost: claim expired after {lease_seconds:g}s")  # fmt: skip
    try:
        count = int(db.session.execute(stmt).rowcount)  # type: ignore[attr-defined]
        db.session.commit()
    except DBAPIError as exc:  # a deadlock beside another worker's claim: the next run
        db.session.rollback()
        if not retryable(exc):
            raise
        return 0
    return count


@functools.cache
def _outcome() -> Executable:
    """The UPDATE of one delivery's outcome, guarded by this worker's claim."""
    d = DELIVERIES.c
    return update(DELIVERIES).where(
        d.id == bindparam("b_id"), d.status == SENDING, d.locked_by == bindparam("b_worker")
    ).values(status=bindparam("b_status"), attempts=d.attempts + 1, locked_by=None,
             locked_at=None, next_attempt_at=bindparam("b_due"),
             last_attempt_at=bindparam("b_at"), response_code=bindparam("b_code"),
             latency_ms=bindparam("b_ms"), response=bindparam("b_response"),
             error=bindparam("b_error"))  # fmt: skip


def record(worker_id: str, results: list[tuple[Claimed, Answer]], now: datetime) -> list[int]:
    """Write what came of each request still claimed by this worker; commit.

    Returns the endpoints disabled because a delivery used its last retry.
    """
    disabled = []
    for claimed, answer in results:
        tries = claimed.attempts + 1
        if answer.delivered:
            status, due = DELIVERED, now
        elif tries <= len(RETRIES):
            status, due = PENDING, now + timedelta(seconds=RETRIES[tries - 1])
        else:
            status, due = FAILED, now
        values = {"b_id": claimed.id, "b_worker": worker_id, "b_status": status, "b_due": due,
                  "b_at": now, "b_code": answer.code, "b_ms": answer.latency_ms,
                  "b_response": (answer.body or "")[:RESPONSE_CHARS] or None,
                  "b_error": answer.error}  # fmt: skip
        moved = db.session.execute(_outcome(), values).rowcount  # type: ignore[attr-defined]
        if moved == 1 and status == FAILED:
            reason = f"delivery {claimed.id} failed {tries} times, lastly: {answer.error}"
            if disable(claimed.endpoint_id, reason, now):
                disabled.append(claimed.endpoint_id)
    db.session.commit()
    return disabled


def disable(endpoint_id: int, reason: str, now: datetime | None = None) -> bool:
    """Stop delivering to an endpoint, saying why; its deliveries wait (caller commits)."""
    e = ENDPOINTS.c
    stmt = update(ENDPOINTS).where(e.id == endpoint_id, e.enabled.is_(True))
    stmt = stmt.values(enabled=False, disabled_at=now or utcnow(), disabled_reason=reason)
    return bool(db.session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def send_again(delivery_id: int, now: datetime | None = None) -> bool:
    """Put a delivered or failed delivery back to pending with a fresh set of retries.

    It keeps its webhook-id: a receiver that had it already can tell. Caller commits.
    """
    d = DELIVERIES.c
    stmt = update(DELIVERIES).where(d.id == delivery_id, d.status.in_((DELIVERED, FAILED)))
    stmt = stmt.values(status=PENDING, attempts=0, next_attempt_at=now or utcnow(), error=None)
    return bool(db.session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def send_test(endpoint_id: int, now: datetime | None = None) -> str:
    """Queue a test event for one endpoint (whatever kinds it takes); its webhook-id."""
    now = now or utcnow()
    event_id = events.new_event_id()
    db.session.execute(insert(DELIVERIES), {
        "endpoint_id": endpoint_id, "event_id": event_id, "kind": events.TEST,
        "payload": events.test_event(now).body(now), "status": PENDING, "attempts": 0,
        "next_attempt_at": now, "created_at": now,
    })  # fmt: skip
    return event_id


def of_endpoint(endpoint_id: int, before: int | None = None,
                limit: int = PAGE) -> tuple[list[Any], int | None]:  # fmt: skip
    """An endpoint's deliveries newest first (keyset paged), and the next page's `before`."""
    query = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id)
    if before is not None:
        query = query.where(WebhookDelivery.id < before)
    rows = list(db.session.scalars(query.order_by(WebhookDelivery.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    return rows[:limit], (rows[limit - 1].id if more else None)


def purge_old(cutoff: datetime, batch: int = 1000) -> int:
    """Remove deliveries made before cutoff that are settled (delivered, failed) or whose
    endpoint is gone (one removed while a recording group was writing); how many went."""
    d = DELIVERIES.c
    orphan = d.endpoint_id.not_in(select(ENDPOINTS.c.id))
    old = select(d.id).where(d.created_at < cutoff, d.status.in_((DELIVERED, FAILED)) | orphan)
    removed = 0
    while ids := list(db.session.scalars(old.limit(batch))):
        removed += int(db.session.execute(delete(DELIVERIES).where(d.id.in_(ids))).rowcount)  # type: ignore[attr-defined]
        db.session.commit()
    db.session.commit()
    return removed
