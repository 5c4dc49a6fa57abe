"""Keeping suppressed addresses off the wire: new messages at enqueue, failed ones at a
resend, and queued ones as a worker's batch goes out.

A recipient on the list gets the entry state "suppressed" with the list's reason in its
"reply"; the workers send only to entries without a state (deliveries.pending), so it is
never sent to, this attempt or any other. A message left with no one to send to is
stored failed, settled at once. With OUTBOX_SUPPRESSED=reject nothing is stored and
Rejected names the addresses instead.
"""

import dataclasses
from collections.abc import Collection, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any, cast

from flask import current_app
from sqlalchemy import Row, Table, select

from outbox.capabilities.suppression import describe, key_of, matching, suppresses
from outbox.capabilities.webhooks import events
from outbox.core.deliveries import pending
from outbox.core.recipients import Recipient, State, moved
from outbox.core.status import Status
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.models import Message
from outbox.models.db import db
from outbox.queue import write_recipients

MESSAGES = cast(Table, Message.__table__)
SUPPRESSED = State.SUPPRESSED


class Rejected(Exception):
    """Recipients on the suppression list, with OUTBOX_SUPPRESSED=reject: nothing was stored."""

    def __init__(self, found: list[dict[str, Any]]) -> None:
        # {"index" (in a batch), "field" (to, cc, bcc), "address", "reason"} for each
        self.found = found
        named = ", ".join(dict.fromkeys(str(f["address"]) for f in found))
        super().__init__(f"on the suppression list: {named}")


def _addresses(rows: Sequence[dict[str, Any]]) -> list[str]:
    return [entry.address for row in rows for entry in row["recipients"]]


def screen(rows: list[dict[str, Any]], now: datetime, *, batch: bool = False) -> dict[int, int]:
    """Mark the suppressed recipients of new message rows, in place; one query for all.

    Returns, by the row's index, how many of its recipients were suppressed (rows with
    none are left out). Rejected instead, with OUTBOX_SUPPRESSED=reject; for a batch,
    each address found carries the index of its message.
    """
    found = matching(_addresses(rows), now, hot=True)
    if not found:
        return {}
    if current_app.config["SUPPRESSED"] == "reject":
        refused = [
            {
                **({"index": n} if batch else {}),
                "field": entry.kind.value,
                "address": entry.address,
                "reason": describe(hit),
            }
            for n, row in enumerate(rows)
            for entry in row["recipients"]
            if (hit := _hit(entry, found, _stream_of(row)))
        ]
        if refused:
            raise Rejected(refused)
        return {}
    marked: dict[int, int] = {}
    for n, row in enumerate(rows):
        entries, count = _marked(row["recipients"], found, Status.QUEUED, _stream_of(row))
        if count:
            row["recipients"] = entries
            marked[n] = count
            if not pending(entries):
                _fail(row, now)
    return marked


def _stream_of(row: dict[str, Any]) -> str:
    """A new row's stream: the one it names, else the column's default."""
    return str(row.get("stream") or DEFAULT_STREAM.value)


def _hit(entry: Recipient, found: dict[str, Row[Any]], stream: str) -> Row[Any] | None:
    """The live entry that keeps mail of this stream from a recipient, if any."""
    hit = found.get(key_of(entry.address))
    return hit if hit is not None and suppresses(hit, stream) else None


def _marked(
    entries: list[Recipient], found: dict[str, Row[Any]], status: Status | str, stream: str
) -> tuple[list[Recipient], int]:
    """Entries with the suppressed ones marked, and how many were; status and stream: their
    message's."""
    marked, count = [], 0
    for entry in entries:
        hit = _hit(entry, found, stream)
        if hit is not None and entry.state is None:
            entry = moved(entry, status, SUPPRESSED, reply=describe(hit), attempts=0)
            count += 1
        marked.append(entry)
    return marked, count


def _fail(row: dict[str, Any], now: datetime) -> None:
    """A new message with no one to send to: stored failed, settled, saying why."""
    named = ", ".join(dict.fromkeys(e.address for e in row["recipients"]))
    row.update(
        status=Status.FAILED.value,
        settled_at=now,
        last_error=f"every recipient is on the suppression list: {named}",
    )


def announce(stored: Sequence[tuple[int, dict[str, Any]]], now: datetime) -> None:
    """The events of stored messages' suppressed recipients (and of the messages failed for
    them), all at once, in the caller's transaction."""
    found: list[events.Event] = []
    for pk, row in stored:
        message_id = str(row["message_id"])
        found.extend(
            events.Event(events.SUPPRESSED, pk, message_id, entry.address,
                         text=entry.reply, at=now)
            for entry in row["recipients"] if entry.state is SUPPRESSED
        )  # fmt: skip
        if row["status"] == Status.FAILED.value:
            found.append(
                events.Event(events.FAILED, pk, message_id, text=row["last_error"], at=now)
            )
    if found:
        events.emit_many(found, now)


def restate(ids: Collection[int] | None) -> set[int]:
    """Bring the marks of failed or cancelled messages (these, or every failed one) up to
    date with the list before they are queued again; the ids left with no one to send to.

    An entry taken off the list since is sent to again; one put on it since is not. In
    the caller's transaction.
    """
    c = MESSAGES.c
    stmt = select(c.id, c.recipients, c.status, c.stream)
    if ids is None:
        stmt = stmt.where(c.status == Status.FAILED.value)
    else:
        stmt = stmt.where(
            c.id.in_(list(ids)), c.status.in_([Status.FAILED.value, Status.CANCELLED.value])
        )
    rows = db.session.execute(stmt).all()
    found = matching([e.address for row in rows for e in row.recipients])
    nobody = set()
    for pk, entries, status, stream in rows:
        lifted = [_lifted(entry, found, status, stream) for entry in entries]
        now_marked, _ = _marked(lifted, found, status, stream)
        if now_marked != entries:  # not a move: the status stays
            write_recipients(pk, (Status.FAILED, Status.CANCELLED), now_marked)
        if not pending(now_marked):
            nobody.add(pk)
    return nobody


def _lifted(entry: Recipient, found: dict[str, Row[Any]], status: str, stream: str) -> Recipient:
    """An entry marked suppressed whose address the list no longer keeps from the
    message's stream, unmarked."""
    if entry.state is not SUPPRESSED or _hit(entry, found, stream) is not None:
        return entry
    return moved(entry, status, State.PENDING, reply=None, attempts=None)


def at_send(claims: list[Any], now: datetime) -> list[Any]:
    """A worker's claims as they go out, with the pending recipients put on the list since
    their message was queued marked suppressed: in the database, under the claim, and in
    the claim's row (queue.Claim.mail). None is sent to; a message left with no one to
    send to fails (worker._prepare). One query while the list holds a live entry, none
    while it is empty; commits.
    """
    found = matching([e.address for claim in claims
                      for e in pending(claim.mail.recipients)], now, hot=True)  # fmt: skip
    if not found:
        return claims
    told, screened = [], []
    for claim in claims:
        before = list(claim.mail.recipients)
        entries, count = _marked(before, found, Status.SENDING, claim.mail.stream)
        if count and write_recipients(claim.id, Status.SENDING, entries, held_by=claim.worker_id):
            row = SimpleNamespace(**{**claim.mail._mapping, "recipients": entries})
            claim = dataclasses.replace(claim, mail=row)
            told += [events.Event(events.SUPPRESSED, claim.id, str(row.message_id),
                                  new.address, text=new.reply, at=now)
                     for old, new in zip(before, entries, strict=True)
                     if old.state is None and new.state is SUPPRESSED]  # fmt: skip
        screened.append(claim)
    if told:
        events.emit_many(told, now)
    db.session.commit()
    return screened
