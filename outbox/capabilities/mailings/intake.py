"""Taking a mailing in: its fields and its recipients as they stream, stored all or none.

The mailing row goes in first, in the request's transaction, then its recipients a chunk
at a time (recipients.Writer); the transaction commits only once the last recipient is
checked and stored. Any fault rolls it all back: a mailing the API acknowledged is in the
database whole, and an error leaves nothing of it.
"""

import itertools
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any, cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.exc import IntegrityError

from outbox.capabilities.mailings import head as heads
from outbox.capabilities.mailings.head import Head, Invalid
from outbox.capabilities.mailings.recipients import MAX_RECIPIENTS, Writer, inserted
from outbox.capabilities.mailings.stream import Malformed, Spool, read
from outbox.models import Mailing, MailingAttachment, MailingAttachmentChunk, utcnow
from outbox.models.db import db
from outbox.models.types import CHUNK_BYTES

MAILINGS = cast(Table, Mailing.__table__)
OPEN, PAUSED, CANCELLED = "open", "paused", "cancelled"
APPEND_ONLY = "is not a field of an append (only recipients)"
__all__ = ["Malformed", "Refusal", "append", "create"]


class Refusal(Exception):
    """A mailing not taken: the HTTP status, the text, and the errors naming each fault."""

    def __init__(self, code: int, error: str, errors: list[dict[str, Any]] | None = None,
                 **extra: Any) -> None:  # fmt: skip
        super().__init__(error)
        self.code, self.error, self.errors, self.extra = code, error, errors or [], extra


def _fields_then_recipients(events: Iterator[tuple[str, Any]]) -> tuple[dict[str, Any], Any]:
    """The fields before recipients, and the first recipient; Refusal if none come."""
    fields: dict[str, Any] = {}
    for kind, value in events:
        if kind == "recipient":
            return fields, value
        if kind == "end":  # an empty list
            raise Refusal(422, "the mailing was not created", [_none_listed()])
        fields[value[0]] = value[1]
    shape = {"field": "recipients", "error": "required: a list of {email, name?, fields?}"}
    raise Refusal(422, "the mailing was not created", [shape])


def _none_listed() -> dict[str, str]:
    return {"field": "recipients", "error": "must list at least one recipient"}


def _store_attachments(mailing_id: int, head: Head) -> None:
    for upload in head.draft.attachments:
        data = upload.data
        stmt = insert(MailingAttachment).values(
            mailing_id=mailing_id,
            filename=upload.filename,
            content_type=upload.content_type,
            size=len(data),
            content_id=upload.content_id,
        )
        key = inserted(stmt, {})
        for seq, start in enumerate(range(0, len(data), CHUNK_BYTES)):
            chunk = {"attachment_id": key, "seq": seq, "data": data[start : start + CHUNK_BYTES]}
            db.session.execute(insert(MailingAttachmentChunk), chunk)


def _mailing_row(head: Head, source: str, key: str | None, now: datetime) -> dict[str, Any]:
    draft = head.draft
    return {
        "from_addr": draft.from_addr.address, "from_name": draft.from_addr.name,
        "reply_to": draft.reply_to.address if draft.reply_to else None,
        "reply_to_name": draft.reply_to.name if draft.reply_to else "",
        "subject": draft.subject, "text_body": draft.text, "html_body": draft.html,
        "headers": draft.headers or None, "priority": draft.priority,
        "send_after": draft.send_after, "unsubscribe_url": head.unsubscribe_url,
        "state": OPEN, "recipient_count": 0, "attachment_count": len(draft.attachments),
        "created_at": now, "source": source, "idempotency_key": key,
    }  # fmt: skip


def find_by_key(source: str, key: str) -> Mailing | None:
    stmt = select(Mailing).where(Mailing.source == source, Mailing.idempotency_key == key)
    return db.session.execute(stmt).scalar_one_or_none()


def create(body: IO[bytes], *, source: str, max_attempts: int, default_sender: str | None,
           key: str | None = None) -> tuple[Mailing, bool]:  # fmt: skip
    """Store a mailing and its recipients from a request body; the mailing, and whether new.

    With an Idempotency-Key this source used before, the earlier mailing comes back and
    the body is not read. Refusal naming every fault, with nothing stored.

    The keys may come in any order. With fields before the recipients that make a
    mailing, the recipients are stored as they stream; each is also kept in a Spool, so
    that a field after them (which changes the mailing they were checked against) has
    them taken again, from the spool, under the whole mailing.
    """
    if key is not None and (earlier := find_by_key(source, key)) is not None:
        return earlier, False
    now = utcnow()
    events = read(body)
    fields, first = _fields_then_recipients(events)
    try:
        opened = _open(heads.check(fields, default_sender), source, key, now, max_attempts)
    except Invalid:  # perhaps a field to come makes it whole
        opened = None
    if isinstance(opened, Mailing):
        return opened, False
    with Spool() as spool:
        writer = _stream(opened, fields, itertools.chain([("recipient", first)], events), spool)
        if writer is None:
            reopened = _reopened(fields, default_sender, source, key, now, max_attempts, spool)
            if isinstance(reopened, Mailing):
                return reopened, False
            writer = reopened
    _finish(writer)
    db.session.commit()
    mailing = db.session.get(Mailing, writer.mailing_id)
    assert mailing is not None
    return mailing, True


def _stream(writer: Writer | None, fields: dict[str, Any], events: Iterator[tuple[str, Any]],
            spool: Spool) -> Writer | None:  # fmt: skip
    """Read the rest of the body: each recipient spooled, and added to writer while no field
    has come after the recipients; each field into fields. The writer, or None if a field
    came after it began (its work rolled back)."""
    for kind, value in events:
        if kind == "recipient":
            spool.add(value)
            if writer is not None and _taking(writer):
                writer.add(value)
        elif kind == "field":
            fields[value[0]] = value[1]
            if writer is not None:  # its recipients were checked against a part of the fields
                db.session.rollback()
                writer = None
    return writer


def _open(head: Head, source: str, key: str | None, now: datetime,
          max_attempts: int) -> Writer | Mailing:  # fmt: skip
    """The mailing row and its attachments inserted, and a Writer for its recipients; or the
    mailing a request with the same Idempotency-Key stored meanwhile."""
    try:
        mailing_id = inserted(insert(MAILINGS), _mailing_row(head, source, key, now))
    except IntegrityError:
        db.session.rollback()
        earlier = find_by_key(source, key) if key is not None else None
        if earlier is None:
            raise
        return earlier
    _store_attachments(mailing_id, head)
    return Writer(mailing_id, head, max_attempts, now)


def _reopened(fields: dict[str, Any], default_sender: str | None, source: str, key: str | None,
              now: datetime, max_attempts: int, spool: Spool) -> Writer | Mailing:  # fmt: skip
    """The mailing opened with every field, now all are read, and the spool's recipients
    added; Refusal naming the fields' faults."""
    try:
        head = heads.check(fields, default_sender)
    except Invalid as exc:
        raise Refusal(422, "the mailing was not created", exc.errors) from None
    opened = _open(head, source, key, now, max_attempts)
    if isinstance(opened, Writer):
        for item in spool:
            if not _taking(opened):
                break
            opened.add(item)
    return opened


def _taking(writer: Writer) -> bool:
    """Whether checking goes on: not too many errors to name, nor recipients past the most."""
    return not (writer.full or writer.count > MAX_RECIPIENTS)


def _finish(writer: Writer) -> None:
    """Store the last chunk and count the recipients on the mailing; Refusal (rolled back)
    naming every fault."""
    writer.flush()
    errors = writer.errors + [
        {"index": f["index"], "field": "email", "error": f"{f['address']} is {f['reason']}"}
        for f in writer.rejected
    ]
    if errors:
        db.session.rollback()
        raise Refusal(422, "no recipient was stored", errors)
    stmt = update(MAILINGS).where(MAILINGS.c.id == writer.mailing_id)
    db.session.execute(stmt.values(recipient_count=MAILINGS.c.recipient_count + writer.count))


def append(mailing_id: int, body: IO[bytes], *, max_attempts: int) -> tuple[Mailing, int]:
    """Add the recipients of a body {"recipients": [...]} to an open or paused mailing, all or
    none; the mailing and how many were added. Refusal if it is cancelled or not there."""
    stmt = select(Mailing).where(Mailing.id == mailing_id).with_for_update()
    # Locked until the commit: a pause or cancel waits for the append, and then moves the
    # rows it added too; an append after a pause adds paused rows.
    mailing = db.session.execute(stmt).scalar_one_or_none()
    if mailing is None:
        raise Refusal(404, f"no mailing {mailing_id}")
    if mailing.state == CANCELLED:
        db.session.rollback()
        raise Refusal(409, "the mailing is cancelled: nothing can be added to it")
    events = read(body)
    fields, first = _fields_then_recipients(events)
    if fields:
        db.session.rollback()
        errors = [{"field": name, "error": APPEND_ONLY} for name in fields]
        raise Refusal(422, "no recipient was stored", errors)
    head = heads.of_mailing(mailing)
    writer = Writer(mailing.id, head, max_attempts, utcnow(), paused=mailing.state == PAUSED)
    late = []
    for kind, value in itertools.chain([("recipient", first)], events):
        if kind == "recipient" and _taking(writer):
            writer.add(value)
        elif kind == "field":
            late.append({"field": value[0], "error": APPEND_ONLY})
    if late:
        db.session.rollback()
        raise Refusal(422, "no recipient was stored", late)
    _finish(writer)
    db.session.commit()
    db.session.refresh(mailing)
    return mailing, writer.count
