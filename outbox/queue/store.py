"""Storing new messages: one at a time or in batches, with idempotency keys and attachments."""

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from outbox.core.addresses import Mailbox, a_label
from outbox.core.checks import Upload
from outbox.core.drafts import Draft
from outbox.core.recipients import stored
from outbox.core.status import Status
from outbox.models import Message, utcnow
from outbox.models.db import AUTOCOMMIT, db
from outbox.queue import attachments, hooks
from outbox.queue.inserts import insert_alone, insert_groups, insert_row


def enqueue(
    draft: Draft,
    *,
    source: str,
    max_attempts: int,
    now: datetime | None = None,
    idempotency_key: str | None = None,
    resent_from: int | None = None,
) -> tuple[Message, bool]:
    """Store a message with all its attachments in one transaction.

    Returns the message and whether it is new: with an idempotency key already
    used by this source, the earlier message comes back instead. resent_from: the sent
    message this one copies (staff's "Send again").
    """
    now = now or utcnow()
    row = message_row(
        draft,
        now,
        source=source,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        request_hash=draft.fingerprint() if idempotency_key else None,
        resent_from=resent_from,
    )
    marked = hooks.screened([row], now)  # suppression marks its recipients
    try:
        if draft.attachments or marked or AUTOCOMMIT not in db.engines:
            message = _insert_with_attachments(row, draft.attachments, bool(marked))
        else:
            message = _insert_alone(row)
    except IntegrityError:
        db.session.rollback()
        if idempotency_key is None:
            raise
        earlier = find_by_key(source, idempotency_key)
        if earlier is None:
            raise
        return earlier, False
    return message, True


# The Message returned is never added to a session (queue.inserts writes the row), so it
# keeps what it holds and answering about it needs no further trip to the database.


def _as_stored(pk: int, row: dict[str, object]) -> Message:
    """A Message holding the row just stored, outside any session.

    Made as the ORM makes the objects of rows it loads: without __init__, the values put
    in the instance's dict. Message(**row) would set each column through the attribute
    events and history, to track changes that nothing will flush (its cost: bench/README).
    """
    message: Message = Message.__mapper__.class_manager.new_instance()
    message.__dict__.update(row, id=pk)
    return message


def _insert_with_attachments(
    row: dict[str, Any], uploads: Sequence[Upload], marked: bool = False
) -> Message:
    """The row and its attachments (and, marked, its suppressed recipients' events) in the
    session's transaction, committed."""
    message = _as_stored(insert_row(row), row)
    for upload in uploads:
        attachments.store(message.id, upload)
    if marked:
        hooks.announce([(message.id, row)], row["created_at"])
    db.session.commit()
    return message


def _insert_alone(row: dict[str, object]) -> Message:
    """The row in an INSERT that commits itself: one round trip, no COMMIT after it.

    Straight through the driver (queue.direct): the API's single messages all come here.
    """
    return _as_stored(insert_alone(row), row)


# A batch's messages keep the request's Idempotency-Key with their place in the batch
# after a space. No key of a single message holds a space, so the two never meet.
BATCH_KEY_SEPARATOR = " "
# Rows per INSERT, and about the most bytes of bodies one INSERT carries: well under
# MariaDB's max_allowed_packet (16 MiB by default) whatever the bodies weigh.
INSERT_ROWS = 1000
INSERT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Queued:
    """A stored message of a batch, as the answer names it."""

    id: int
    message_id: str
    request_hash: str | None


def batch_fingerprint(drafts: Sequence[Draft]) -> str:
    """A digest of a whole batch, in order, to tell a true repeat from a reused key."""
    digest = hashlib.sha256(f"{len(drafts)}".encode())
    for draft in drafts:
        digest.update(draft.fingerprint().encode())
    return digest.hexdigest()


def msgid_domain(sender: Mailbox) -> str:
    """The domain of a sender's Message-IDs: its own as A-labels (a msg-id is ASCII), if
    IDNA2008 takes it and it fits the Message-ID column."""
    try:
        domain = a_label(sender.domain)
    except ValueError:
        return "outbox.invalid"
    return domain if domain and len(domain) <= 200 else "outbox.invalid"


def message_row(
    draft: Draft, now: datetime, *, domain: str | None = None, **values: object
) -> dict[str, object]:
    """The column values of a new queued message; domain: msgid_domain(draft.from_addr),
    when the caller has it already (a mailing's many rows)."""
    return {
        # Fixed here and sent on every attempt, so a receiver can tell a retry
        # from a new mail.
        # 128 bits from the OS, not the random module, which the embedding program
        # may seed (test tools do).
        "message_id": f"<{secrets.token_hex(16)}@{domain or msgid_domain(draft.from_addr)}>",
        "from_addr": draft.from_addr.address,
        "from_name": draft.from_addr.name,
        "reply_to": draft.reply_to.address if draft.reply_to else None,
        "reply_to_name": draft.reply_to.name if draft.reply_to else "",
        "recipients": stored(draft.to, draft.cc, draft.bcc),
        "subject": draft.subject,
        "text_body": draft.text,
        "html_body": draft.html,
        "headers": draft.headers or None,
        "meta": draft.metadata or None,
        "priority": draft.priority,
        "stream": draft.stream.value,
        "send_after": draft.send_after,
        "status": Status.QUEUED.value,
        "attempts": 0,
        "next_attempt_at": max(draft.send_after, now) if draft.send_after else now,
        "created_at": now,
        "attachment_count": len(draft.attachments),
        "resent_from": None,
        **values,
    }


def _listed_size(draft: Draft) -> int:
    """About the characters of a draft's recipients as the JSON column holds them."""
    listed = [*draft.to, *draft.cc, *draft.bcc]
    return sum(len(m.address) + len(m.name) + 40 for m in listed)


def _row_groups(drafts: Sequence[Draft]) -> Iterable[range]:
    """Index ranges of the drafts' rows that go in one INSERT each."""
    start, weight = 0, 0
    for index, draft in enumerate(drafts):
        size = len(draft.text or "") + len(draft.html or "") + _listed_size(draft)
        if index > start and (index - start >= INSERT_ROWS or weight + size > INSERT_BYTES):
            yield range(start, index)
            start, weight = index, 0
        weight += size
    if start < len(drafts):
        yield range(start, len(drafts))


def enqueue_batch(
    drafts: Sequence[Draft],
    *,
    source: str,
    max_attempts: int,
    now: datetime | None = None,
    idempotency_key: str | None = None,
) -> tuple[list[Queued], bool]:
    """Store many messages, all of them or none, in one transaction.

    Returns the stored messages in the drafts' order and whether they are new: with
    an idempotency key already used by this source for a batch, the earlier batch
    comes back instead, in its own order.
    """
    now = now or utcnow()
    keyed = idempotency_key is not None
    request_hash = batch_fingerprint(drafts) if keyed else None
    rows = [
        message_row(
            draft,
            now,
            source=source,
            max_attempts=max_attempts,
            idempotency_key=f"{idempotency_key}{BATCH_KEY_SEPARATOR}{n}" if keyed else None,
            request_hash=request_hash,
        )
        for n, draft in enumerate(drafts)
    ]
    marked = hooks.screened(rows, now, batch=True)
    try:
        ids = insert_groups(rows, _row_groups(drafts))
        hooks.announce([(ids[n], rows[n]) for n in marked], now)
        for pk, draft in zip(ids, drafts, strict=True):
            for upload in draft.attachments:
                attachments.store(pk, upload)
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        if idempotency_key is None:
            raise
        earlier = find_batch(source, idempotency_key, len(drafts))
        if not earlier:
            raise
        return earlier, False
    pairs = zip(ids, rows, strict=True)
    queued = [Queued(pk, str(row["message_id"]), request_hash) for pk, row in pairs]
    return queued, True


def find_batch(source: str, idempotency_key: str, count: int) -> list[Queued]:
    """Up to count messages of the batch a source stored under a key, in batch order."""
    keys = [f"{idempotency_key}{BATCH_KEY_SEPARATOR}{n}" for n in range(count)]
    stmt = select(
        Message.id, Message.message_id, Message.request_hash, Message.idempotency_key
    ).where(Message.source == source, Message.idempotency_key.in_(keys))
    found = {row.idempotency_key: row for row in db.session.execute(stmt)}
    db.session.commit()
    return [Queued(r.id, r.message_id, r.request_hash) for k in keys if (r := found.get(k))]


def find_by_key(source: str, idempotency_key: str) -> Message | None:
    """The message a source stored under an idempotency key, if any."""
    stmt = select(Message).where(
        Message.source == source, Message.idempotency_key == idempotency_key
    )
    return db.session.execute(stmt).scalar_one_or_none()
