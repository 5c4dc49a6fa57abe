"""What happened to messages and recipients, told to the apps through their webhooks.

The kinds and emit()'s signature are the contract the bounce and the suppression code
call; recorded() and lost() are the queue's hooks (registered by outbox.app). An event
becomes one row of webhook_deliveries per enabled endpoint that takes its kind, written
in the caller's transaction (the caller commits), so an event is kept exactly when what
it tells of is; the workers deliver the rows (outbox.capabilities.webhooks).
"""

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from flask import current_app
from sqlalchemy import Table, insert, select

from outbox.core.recipients import State
from outbox.core.status import Status
from outbox.core.webhook_status import WebhookStatus
from outbox.models import Message, WebhookDelivery, WebhookEndpoint, utcnow
from outbox.models.db import db
from outbox.queue import Written
from outbox.queue.wire import iso

SENT = "message.sent"
DEFERRED = "message.deferred"
FAILED = "message.failed"
REFUSED = "recipient.failed"  # refused for good, in a message sent to others or waiting
BOUNCED = "recipient.bounced"
COMPLAINED = "recipient.complained"  # reported as spam by its mailbox (a feedback report)
SUPPRESSED = "recipient.suppressed"
DOMAIN_PAUSED = "domain.paused"  # a guardrail paused a sending domain's broadcast mail
KINDS = (SENT, DEFERRED, FAILED, REFUSED, BOUNCED, COMPLAINED, SUPPRESSED, DOMAIN_PAUSED)
TEST = "webhook.test"  # an endpoint's "send a test event", to that endpoint alone
# The event each recorded status tells of (recorded, lost).
BY_STATUS = {Status.SENT: SENT, Status.DEFERRED: DEFERRED, Status.FAILED: FAILED}
# A process that found no enabled endpoint asks again only after this long, so that
# while webhooks are not in use recording outcomes costs no query at all. An endpoint
# added or enabled in another process gets the events of outcomes recorded from at most
# this long after; in this one, at once (endpoints_changed).
NONE_FOR = 2.0  # seconds
DELIVERIES = cast(Table, WebhookDelivery.__table__)
ENDPOINTS = cast(Table, WebhookEndpoint.__table__)


@dataclass(frozen=True)
class Event:
    """One thing that happened, as its webhook's data tells it: the same keys for every kind.

    message_pk and message_id are None only in the test event, which is of no message.
    """

    kind: str
    message_pk: int | None
    message_id: str | None
    recipient: str | None = None
    code: int | None = None  # an SMTP reply code, a number as in the API
    text: str | None = None
    at: datetime | None = None
    metadata: Mapping[str, str] | None = None  # the message's; None: read when queued
    dsn: str | None = None  # a bounce's DSN status, "5.1.1"
    stream: str | None = None  # the message's stream, read with its metadata

    def data(self) -> dict[str, Any]:
        return {"id": self.message_pk, "message_id": self.message_id,
                "recipient": self.recipient, "code": self.code, "dsn": self.dsn,
                "text": self.text, "at": iso(self.at, "microseconds"),
                "stream": self.stream, "metadata": dict(self.metadata or {})}  # fmt: skip

    def body(self, now: datetime) -> str:
        """The JSON a receiver gets (and the signature covers): type, timestamp and data."""
        return json.dumps({"type": self.kind, "timestamp": iso(now, "microseconds"),
                           "data": self.data()}, ensure_ascii=False,
                          separators=(",", ":"))  # fmt: skip


def test_event(now: datetime) -> Event:
    """The test event: of no message, so its id and message_id are null."""
    return Event(TEST, None, None, text="a test event from outbox", at=now, metadata={})


def new_event_id() -> str:
    """The webhook-id of a new event: the same for every endpoint and every retry."""
    return f"evt_{uuid.uuid4().hex}"


def emit(
    kind: str,
    *,
    message_pk: int,
    message_id: str,
    recipient: str | None = None,
    code: int | None = None,
    text: str | None = None,
    at: datetime | None = None,
    dsn: str | None = None,
) -> None:
    """Queue one event for every enabled endpoint that takes its kind, in the caller's
    transaction (the caller commits)."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}; one of {', '.join(KINDS)}")
    emit_many([Event(kind, message_pk, message_id, recipient, code, text, at, dsn=dsn)])


def emit_many(events: Iterable[Event], now: datetime | None = None) -> int:
    """Queue several events: one read of the endpoints, one multi-row INSERT. The rows made."""
    endpoints = _enabled()
    if not endpoints:
        return 0
    return _insert(endpoints, events, now or utcnow())


def recorded(written: Written) -> int:
    """The events of a group of outcomes queue.record wrote (before it commits).

    Its outcomes are read only when some endpoint takes a kind of them: this costs one
    small read of the endpoints a group, none while there is no enabled endpoint
    (NONE_FOR). The Message-IDs are read then, in one query, only for the messages whose
    event is taken.
    """
    statuses = written.statuses
    endpoints = _enabled()
    kinds = {kind for _, taken in endpoints for kind in taken}
    if not kinds:
        return 0
    found = [event for done, error in written.errors if done.claim.id in statuses
             for event in _told(done, error, statuses[done.claim.id], kinds)]  # fmt: skip
    if not found:
        return 0
    c = Message.__table__.c
    ids = {event.message_pk for event in found}
    rows = {row.id: row for row in db.session.execute(
        select(c.id, c.message_id, c.meta, c.stream).where(c.id.in_(ids)))}  # fmt: skip
    events = [replace(event, message_id=rows[event.message_pk].message_id,
                      metadata=rows[event.message_pk].meta or {},
                      stream=rows[event.message_pk].stream) for event in found]  # fmt: skip
    return _insert(endpoints, events, utcnow())


def lost(message_pk: int, message_id: str, status: Status, error: str, at: datetime) -> None:
    """The event of a dead worker's claim taken back (queue.release_stale), before it commits."""
    emit(BY_STATUS[status], message_pk=message_pk, message_id=message_id, text=error, at=at)


def _told(done: Any, error: str | None, status: Status, kinds: set[str]) -> list[Event]:
    """The events of one recorded outcome that some endpoint takes, their Message-ID and
    metadata still to read: the message's, and one for each recipient this attempt
    refused for good while others were sent or wait (a failed message's own event tells
    of all of its recipients)."""
    pk, told = done.claim.id, []
    if BY_STATUS[status] in kinds:
        told.append(Event(BY_STATUS[status], pk, None, code=_code(status, done.code),
                          text=error or done.reply, at=done.finished_at))  # fmt: skip
    if REFUSED in kinds and status is not Status.FAILED:
        attempt, seen = done.claim.attempts + 1, set()
        for entry in done.recipients or ():
            address = entry.address
            if entry.state is State.FAILED and entry.attempts == attempt:
                if address not in seen:
                    seen.add(address)
                    told.append(Event(REFUSED, pk, None, address, entry.code, entry.reply,
                                      done.finished_at))  # fmt: skip
    return told


def _code(status: Status, code: int | None) -> int | None:
    """The SMTP code an outcome tells: a sent mail's is 250, the one success reply to the
    end of DATA (RFC 5321 4.3.2), also when some recipients were refused: the attempt's
    code is then a refusal's, which the text names with its recipient."""
    return 250 if status is Status.SENT else code


def _enabled() -> list[tuple[int, set[str]]]:
    """The enabled endpoints and the kinds each takes: one read of a small table, or none
    within NONE_FOR of finding none."""
    state = current_app.extensions.setdefault(__name__, {"none_until": 0.0})
    if time.monotonic() < state["none_until"]:
        return []
    c = ENDPOINTS.c
    rows = db.session.execute(select(c.id, c.events).where(c.enabled.is_(True))).all()
    if not rows:
        state["none_until"] = time.monotonic() + NONE_FOR
    return [(row.id, set(row.events.split())) for row in rows]


def endpoints_changed() -> None:
    """Forget that this process found no endpoint: one was added or enabled here."""
    current_app.extensions.setdefault(__name__, {})["none_until"] = 0.0


def _of_messages(message_pks: list[int]) -> dict[int, tuple[dict[str, str], str]]:
    """The metadata and stream of these messages, read in one query (none if no pks)."""
    if not message_pks:
        return {}
    c = Message.__table__.c
    stmt = select(c.id, c.meta, c.stream).where(c.id.in_(set(message_pks)))
    return {row.id: (row.meta or {}, row.stream) for row in db.session.execute(stmt)}


def _insert(endpoints: list[tuple[int, set[str]]], events: Iterable[Event], now: datetime) -> int:
    wanted = [(event, [endpoint for endpoint, kinds in endpoints if event.kind in kinds])
              for event in events]  # fmt: skip
    wanted = [(event, wanting) for event, wanting in wanted if wanting]
    unread = [e.message_pk for e, _ in wanted if e.metadata is None and e.message_pk is not None]
    read = _of_messages(unread)
    rows = []
    for event, wanting in wanted:
        if event.metadata is None:
            meta, stream = read.get(event.message_pk or 0, ({}, None))
            event = replace(event, metadata=meta, stream=stream)
        text, event_id = event.body(now), new_event_id()
        rows += [{"endpoint_id": endpoint, "event_id": event_id, "kind": event.kind,
                  "payload": text, "status": WebhookStatus.PENDING.value, "attempts": 0,
                  "next_attempt_at": now,
                  "created_at": now} for endpoint in wanting]  # fmt: skip
    if rows:
        db.session.execute(insert(DELIVERIES), rows)
    return len(rows)
