"""The only code that writes a message's status: every move is a guarded UPDATE."""

import functools
import hashlib
import io
import random
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.headerregistry import Address
from email.utils import getaddresses, make_msgid, parseaddr
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Executable,
    Row,
    Table,
    bindparam,
    case,
    exists,
    insert,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from .drafts import Draft, Upload
from .extensions import AUTOCOMMIT, db
from .models import CHUNK_BYTES, Attachment, AttachmentChunk, Attempt, Message, utcnow
from .status import CLAIMABLE, Outcome, Status, can_move, next_attempt_at, sources

CLAIM_TRIES = 8

# Statements on the tables, not the mapped classes: the session then runs them as
# plain SQL and reuses their cache keys, instead of preparing each again for the ORM.
MESSAGES = cast(Table, Message.__table__)
ATTEMPTS = cast(Table, Attempt.__table__)


class MoveRefused(Exception):
    """The message is not in a status from which that move is allowed."""


class Damaged(Exception):
    """A message's stored attachments are incomplete; sent, it would be another mail."""


@dataclass(frozen=True)
class Claim:
    """A message this worker holds: what the outcome writes need to stay guarded."""

    id: int
    worker_id: str
    attempts: int
    max_attempts: int
    started_at: datetime
    mail: Any = field(default=None, compare=False, repr=False)  # claim_batch(with_mail=True)


@dataclass(frozen=True)
class Retry:
    """The retry schedule settings."""

    delay: float
    backoff: float
    max_delay: float


def _changed(stmt: Executable) -> int:
    """Run an UPDATE and return how many rows it changed."""
    result = db.session.execute(stmt.execution_options(synchronize_session=False))
    return cast(CursorResult[Any], result).rowcount


def _move(message_id: int, old: Iterable[Status], new: Status, **values: object) -> bool:
    """UPDATE one message from one of the old statuses to new; True if it moved."""
    olds = tuple(old)
    assert all(can_move(o, new) for o in olds), (olds, new)
    stmt = (
        update(Message)
        .where(Message.id == message_id, Message.status.in_(olds))
        .values(status=new.value, **values)
    )
    return _changed(stmt) == 1


INSERT_MESSAGE = insert(MESSAGES)


def enqueue(
    draft: Draft,
    *,
    source: str,
    max_attempts: int,
    now: datetime | None = None,
    idempotency_key: str | None = None,
) -> tuple[Message, bool]:
    """Store a message with all its attachments in one transaction.

    Returns the message and whether it is new: with an idempotency key already
    used by this source, the earlier message comes back instead.
    """
    row = _message_row(
        draft,
        now or utcnow(),
        source=source,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        request_hash=draft.fingerprint() if idempotency_key else None,
    )
    try:
        if draft.attachments or AUTOCOMMIT not in db.engines:
            message = _insert_with_attachments(row, draft.attachments)
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


# Core INSERTs: not the ORM's unit of work (a third less CPU per message), nor
# Session.execute's ORM layer (a tenth less again). The Message returned is never added
# to a session, so it keeps what it holds and answering about it needs no further trip
# to the database.


def _as_stored(pk: int, row: dict[str, object]) -> Message:
    """A Message holding the row just stored, outside any session.

    Made as the ORM makes the objects of rows it loads: without __init__, the values put
    in the instance's dict. Message(**row) sets each column through the attribute events
    and history, to track changes that nothing will flush: an enqueue request took about
    8% more instructions with it.
    """
    message: Message = Message.__mapper__.class_manager.new_instance()
    message.__dict__.update(row, id=pk)
    return message


def _insert_with_attachments(row: dict[str, object], attachments: Sequence[Upload]) -> Message:
    """The row and its attachments in the session's transaction, committed."""
    result = db.session.connection().execute(INSERT_MESSAGE, row)
    key = result.inserted_primary_key
    assert key is not None  # a single-row INSERT always has one
    message = _as_stored(key[0], row)
    for upload in attachments:
        _store_attachment(message.id, upload.filename, upload.content_type, upload.data)
    db.session.commit()
    return message


def _insert_alone(row: dict[str, object]) -> Message:
    """The row in an INSERT that commits itself: one round trip, no COMMIT after it."""
    with db.engines[AUTOCOMMIT].connect() as conn:
        key = conn.execute(INSERT_MESSAGE, row).inserted_primary_key
    assert key is not None
    return _as_stored(key[0], row)


def _store_attachment(message_pk: int, filename: str, content_type: str, data: bytes) -> None:
    attachment = Attachment(
        message_pk=message_pk, filename=filename, content_type=content_type, size=len(data)
    )
    db.session.add(attachment)
    db.session.flush()
    for seq, start in enumerate(range(0, len(data), CHUNK_BYTES)):
        chunk = AttachmentChunk(
            attachment_id=attachment.id, seq=seq, data=data[start : start + CHUNK_BYTES]
        )
        db.session.add(chunk)
        db.session.flush()
        db.session.expunge(chunk)


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


@functools.lru_cache(maxsize=256)
def _msgid_domain(from_addr: str) -> str:
    """The domain of a sender's Message-IDs: its own, if that fits the Message-ID column."""
    domain = parseaddr(from_addr)[1].rpartition("@")[2]
    return domain if domain and len(domain) <= 200 else "outbox.invalid"


def _message_row(draft: Draft, now: datetime, **values: object) -> dict[str, object]:
    """The column values of a new queued message."""
    return {
        # Fixed here and sent on every attempt, so a receiver can tell a retry
        # from a new mail.
        # make_msgid draws from the random module, which the embedding program may
        # seed (test tools do): the idstring from the OS keeps two ids apart anyway.
        "message_id": make_msgid(secrets.token_hex(8), _msgid_domain(draft.from_addr)),
        "from_addr": draft.from_addr,
        "to_addrs": ", ".join(draft.to),
        "cc_addrs": ", ".join(draft.cc),
        "bcc_addrs": ", ".join(draft.bcc),
        "reply_to": draft.reply_to,
        "subject": draft.subject,
        "text_body": draft.text,
        "html_body": draft.html,
        "headers": draft.headers or None,
        "priority": draft.priority,
        "send_after": draft.send_after,
        "status": Status.QUEUED.value,
        "attempts": 0,
        "next_attempt_at": max(draft.send_after, now) if draft.send_after else now,
        "created_at": now,
        "attachment_count": len(draft.attachments),
        **values,
    }


def _row_groups(rows: list[dict[str, object]], drafts: Sequence[Draft]) -> Iterable[range]:
    """Index ranges of rows that go in one INSERT each."""
    start, weight = 0, 0
    for index, draft in enumerate(drafts):
        size = len(draft.text or "") + len(draft.html or "") + len(str(rows[index]["to_addrs"]))
        if index > start and (index - start >= INSERT_ROWS or weight + size > INSERT_BYTES):
            yield range(start, index)
            start, weight = index, 0
        weight += size
    if start < len(drafts):
        yield range(start, len(drafts))


def _insert_rows(rows: list[dict[str, object]], drafts: Sequence[Draft]) -> list[int]:
    """INSERT the rows, a group per statement; their new ids in the rows' order."""
    ids: dict[str, int] = {}
    table = cast(Table, Message.__table__)
    returning = db.engine.dialect.insert_executemany_returning
    for group in _row_groups(rows, drafts):
        part = [rows[i] for i in group]
        if returning:  # insertmanyvalues: multi-row INSERT ... RETURNING
            stmt = insert(table).returning(table.c.id, table.c.message_id)
            found = db.session.execute(stmt, part)
        else:  # MySQL has no RETURNING: find the rows by their unique Message-IDs
            db.session.execute(insert(table), part)
            wanted = [row["message_id"] for row in part]
            found = db.session.execute(
                select(table.c.id, table.c.message_id).where(table.c.message_id.in_(wanted))
            )
        ids.update({message_id: pk for pk, message_id in found})
    return [ids[str(row["message_id"])] for row in rows]


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
        _message_row(
            draft,
            now,
            source=source,
            max_attempts=max_attempts,
            idempotency_key=f"{idempotency_key}{BATCH_KEY_SEPARATOR}{n}" if keyed else None,
            request_hash=request_hash,
        )
        for n, draft in enumerate(drafts)
    ]
    try:
        ids = _insert_rows(rows, drafts)
        for pk, draft in zip(ids, drafts, strict=True):
            for upload in draft.attachments:
                _store_attachment(pk, upload.filename, upload.content_type, upload.data)
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


def read_attachments(message_pk: int, count: int | None = None) -> list[tuple[str, str, bytes]]:
    """One message's attachments as (filename, content type, data), chunk by chunk.

    Damaged if an attachment's chunks do not add up to the size it was stored with,
    or, given count, if the message holds another number of attachments.
    """
    found = []
    listing = select(Attachment).where(Attachment.message_pk == message_pk)
    for attachment in db.session.execute(listing.order_by(Attachment.id)).scalars().all():
        chunks = select(AttachmentChunk.data).where(AttachmentChunk.attachment_id == attachment.id)
        # One chunk at a time from the server into one buffer, whose getvalue() hands
        # its bytes over uncopied: all chunks fetched and then joined held a 20 MiB
        # attachment twice.
        buffer, ordered = io.BytesIO(), chunks.order_by(AttachmentChunk.seq)
        for chunk in db.session.scalars(ordered, execution_options={"yield_per": 1}):
            buffer.write(chunk)
        data = buffer.getvalue()
        if len(data) != attachment.size:
            raise Damaged(
                f"attachment {attachment.filename!r} holds {len(data)} of its "
                f"{attachment.size} bytes"
            )
        found.append((attachment.filename, attachment.content_type, data))
    if count is not None and len(found) != count:
        raise Damaged(f"{len(found)} of the message's {count} attachments are stored")
    return found


def _retryable(exc: DBAPIError) -> bool:
    """Deadlocks, lock timeouts and busy databases: worth trying the claim again."""
    orig = exc.orig
    code = orig.args[0] if orig is not None and orig.args else None
    if code in (1205, 1213):  # MySQL/MariaDB lock wait timeout, deadlock
        return True
    if getattr(orig, "sqlstate", None) in ("40001", "40P01", "55P03"):  # PostgreSQL
        return True
    return "database is locked" in str(orig)  # SQLite


def claim_batch(
    worker_id: str, limit: int, now: datetime | None = None, *, with_mail: bool = False
) -> list[Claim]:
    """Mark up to limit due messages as sending by this worker, in one short transaction.

    with_mail, each claim also carries the columns a mail is written from (claim.mail),
    read in the claim's own transaction.
    """
    for attempt in range(CLAIM_TRIES):
        moment = now or utcnow()
        try:
            rows = _claim_rows(worker_id, limit, moment, with_mail)
            if with_mail and rows and db.engine.dialect.name != "sqlite":
                # Read for the chosen rows only: a lane holds up to limit rows, and
                # at a million messages both lanes do.
                ids = [r.id for r in rows]
                mails = {m.id: m for m in db.session.execute(_claimed_mail(), {"ids": ids})}
                rows = [mails[i] for i in ids]
            db.session.commit()
        except DBAPIError as exc:
            db.session.rollback()
            if not _retryable(exc) or attempt == CLAIM_TRIES - 1:
                raise
            time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
            continue
        return [
            Claim(r.id, worker_id, r.attempts, r.max_attempts, moment, r if with_mail else None)
            for r in rows
        ]
    raise AssertionError("unreachable")


# What a mail is written from (mime.prepare reads these), beside what a claim needs.
MAIL_COLUMNS = ("subject", "from_addr", "reply_to", "to_addrs", "cc_addrs", "bcc_addrs",
                "text_body", "html_body", "headers", "message_id", "attachment_count")  # fmt: skip


def _claim_columns(with_mail: bool) -> list[Any]:
    names = ("id", "priority", "next_attempt_at", "attempts", "max_attempts")
    return [MESSAGES.c[name] for name in (*names, *(MAIL_COLUMNS if with_mail else ()))]


def _by_claim_order(row: Row[Any]) -> tuple[int, datetime, int]:
    """Due rows go by priority, then due time, then id; ix_messages_claim has this order."""
    return (-row.priority, row.next_attempt_at, row.id)


def _claim_rows(worker_id: str, limit: int, now: datetime, with_mail: bool) -> list[Row[Any]]:
    """Choose and mark the rows of one claim (inside the caller's transaction)."""
    values = {"worker": worker_id, "now": now}
    if db.engine.dialect.name == "sqlite":
        # SQLite has no row locks; one UPDATE takes its write lock, so choosing
        # and marking the rows is a single atomic step.
        found = db.session.execute(_claim_returning(limit, with_mail), values)
        return sorted(found, key=_by_claim_order)
    # One locking read per status, each an ordered range of ix_messages_claim;
    # SKIP LOCKED lets workers take disjoint rows without waiting on each other.
    candidates: list[Row[Any]] = []
    for status in CLAIMABLE:
        candidates.extend(db.session.execute(_lane(status.value, limit), values))
    rows = sorted(candidates, key=_by_claim_order)[:limit]
    if rows:
        values["ids"] = [r.id for r in rows]
        moved = cast(CursorResult[Any], db.session.execute(_mark_claimed(), values)).rowcount
        # The rows are locked by this transaction, so all of them must move.
        if moved != len(rows):
            raise RuntimeError(f"{moved} of {len(rows)} locked messages claimed")
    return rows


def _claim_order() -> tuple[Any, ...]:
    c = MESSAGES.c
    return (c.priority.desc(), c.next_attempt_at, c.id)


@functools.lru_cache(maxsize=16)
def _lane(status: str, limit: int) -> Executable:
    """Lock up to limit due rows of one claimable status, in claim order, skipping locked ones."""
    c = MESSAGES.c
    lane = select(*_claim_columns(False))
    lane = lane.where(c.status == status, c.next_attempt_at <= bindparam("now"))
    return lane.order_by(*_claim_order()).limit(limit).with_for_update(skip_locked=True)


@functools.cache
def _claimed_mail() -> Executable:
    """The claim's and the mail's columns of the given rows."""
    ids: Any = bindparam("ids", expanding=True)
    return select(*_claim_columns(True)).where(MESSAGES.c.id.in_(ids))


@functools.lru_cache(maxsize=16)
def _claim_returning(limit: int, with_mail: bool) -> Executable:
    """SQLite's claim: mark up to limit due rows and return them, in one statement."""
    c = MESSAGES.c
    claimable = [s.value for s in CLAIMABLE]
    due = select(c.id).where(c.status.in_(claimable), c.next_attempt_at <= bindparam("now"))
    chosen = due.order_by(*_claim_order()).limit(limit).scalar_subquery()
    stmt = update(MESSAGES).where(c.id.in_(chosen)).values(_claim_marks())
    return stmt.returning(*_claim_columns(with_mail))


@functools.cache
def _mark_claimed() -> Executable:
    c = MESSAGES.c
    ids: Any = bindparam("ids", expanding=True)
    claimable = [s.value for s in CLAIMABLE]
    return update(MESSAGES).where(c.id.in_(ids), c.status.in_(claimable)).values(_claim_marks())


def _claim_marks() -> dict[str, Any]:
    return {"status": Status.SENDING.value, "locked_by": bindparam("worker"),
            "locked_at": bindparam("now")}  # fmt: skip


def has_due(now: datetime | None = None) -> bool:
    """Whether any due message is still waiting unclaimed (a plain, non-locking read)."""
    now = now or utcnow()
    due = select(Message.id).where(
        Message.status.in_([s.value for s in CLAIMABLE]), Message.next_attempt_at <= now
    )
    found = db.session.execute(select(exists(due))).scalar()
    db.session.commit()
    return bool(found)


def _finish(
    claim: Claim, new: Status, outcome: Outcome, now: datetime, values: dict[str, object],
    code: int | None = None, error: str | None = None,
) -> bool:  # fmt: skip
    """Record one attempt's outcome, guarded by this worker's claim; commit."""
    stmt = (
        update(Message)
        .where(
            Message.id == claim.id,
            Message.status == Status.SENDING.value,
            Message.locked_by == claim.worker_id,
        )
        .values(
            status=new.value,
            attempts=claim.attempts + 1,
            last_retry=now,
            locked_by=None,
            locked_at=None,
            last_error=error,
            **values,
        )
    )
    moved = _changed(stmt) == 1
    if moved:
        db.session.add(
            Attempt(
                message_pk=claim.id,
                started_at=claim.started_at,
                finished_at=now,
                worker_id=claim.worker_id,
                outcome=outcome.value,
                smtp_code=code,
                error=error,
            )
        )
    db.session.commit()
    return moved


@dataclass(frozen=True)
class Finished:
    """What one attempt came to, waiting to be recorded with others of its batch."""

    claim: Claim
    outcome: Outcome
    finished_at: datetime
    code: int | None = None
    error: str | None = None


def record(finished: Sequence[Finished], retry: Retry | None = None) -> dict[int, Status]:
    """Record the outcomes of some of one worker's claims in one transaction; commit.

    Returns the new status of each message recorded. A message left out was no
    longer this worker's claim (taken back as stale), and nothing was written for it.
    A few statements for the whole group instead of an UPDATE, an INSERT and a COMMIT
    per message: the per-message commit was most of a worker's time. The statements
    are built once for each shape of group and reused with new values: building a
    CASE of twenty rows afresh cost more CPU than sending the twenty mails.
    """
    if not finished:
        return {}
    worker_id = finished[0].claim.worker_id
    moves: dict[Status, list[tuple[Finished, Outcome, str | None]]] = {}
    for done in finished:
        if done.claim.worker_id != worker_id:
            raise ValueError("record() takes one worker's outcomes at a time")
        new, outcome, error = _settles(done)
        moves.setdefault(new, []).append((done, outcome, error))
    returning = bool(db.engine.dialect.update_returning)
    recorded = _record_moves(moves, worker_id, retry, returning=returning)
    if recorded is None:
        # MariaDB/MySQL, no RETURNING: an UPDATE changed fewer rows than it was given,
        # so a claim had passed to another worker. Undo, lock the rows still held and
        # read which they are, then again. (Most groups are wholly held: this saves
        # the locking read on all of those.)
        db.session.rollback()
        ids = [done.claim.id for done in finished]
        held = set(db.session.scalars(_held_rows(), {"ids": ids, "worker": worker_id}))
        recorded = _record_moves(moves, worker_id, retry, held=held)
        if recorded is None:  # locked: all of them must move
            raise RuntimeError("locked messages did not move")
    attempts = [
        {
            "message_pk": done.claim.id,
            "started_at": done.claim.started_at,
            "finished_at": done.finished_at,
            "worker_id": worker_id,
            "outcome": outcome.value,
            "smtp_code": done.code,
            "error": error,
        }
        for group in moves.values()
        for done, outcome, error in group
        if done.claim.id in recorded
    ]
    if attempts:
        db.session.execute(insert(ATTEMPTS), attempts)
    db.session.commit()
    return recorded


Moves = dict[Status, list[tuple["Finished", Outcome, str | None]]]


def _record_moves(
    moves: Moves, worker_id: str, retry: Retry | None, *,
    returning: bool = False, held: set[int] | None = None,
) -> dict[int, Status] | None:  # fmt: skip
    """Move each group's messages still claimed by worker_id (those in held, if given).

    Returns each moved message's new status, or None when, without RETURNING, an
    UPDATE changed fewer rows than it was given.
    """
    recorded: dict[int, Status] = {}
    for new, group in moves.items():
        rows = [row for row in group if held is None or row[0].claim.id in held]
        if not rows:
            continue
        errors = {error for _, _, error in rows}
        shared = errors.pop() if len(errors) == 1 else _PER_ROW
        stmt = _outcome_update(new, len(rows), returning, shared is _PER_ROW)
        values: dict[str, object] = {"worker": worker_id, "error": shared}
        for n, (done, _, error) in enumerate(rows):
            values[f"id{n}"] = done.claim.id
            values[f"at{n}"] = done.finished_at
            values[f"error{n}"] = error
            if new is Status.DEFERRED:
                if retry is None:
                    raise ValueError("recording a deferral needs the retry schedule")
                values[f"due{n}"] = next_attempt_at(
                    done.claim.attempts + 1,
                    done.finished_at,
                    retry.delay,
                    retry.backoff,
                    retry.max_delay,
                )  # fmt: skip
        result = db.session.execute(stmt, values)
        if returning:
            recorded.update(dict.fromkeys(result.scalars(), new))
        elif cast(CursorResult[Any], result).rowcount != len(rows):
            return None
        else:
            recorded.update((done.claim.id, new) for done, _, _ in rows)
    return recorded


_PER_ROW = object()  # the rows' errors differ: each gets its own


@functools.cache
def _held_rows() -> Executable:
    """Lock and list the given ids still claimed by the given worker."""
    ids: Any = bindparam("ids", expanding=True)
    c = MESSAGES.c
    guard = (c.status == Status.SENDING.value, c.locked_by == bindparam("worker"))
    return select(c.id).where(c.id.in_(ids), *guard).with_for_update()


@functools.lru_cache(maxsize=512)
def _outcome_update(new: Status, size: int, returning: bool, per_row_error: bool) -> Executable:
    """The guarded UPDATE that records size outcomes moving their messages to new.

    Values come as parameters: id0..idN and at0..atN (when each finished), error0..errorN
    or one error for all, due0..dueN for a deferral, and worker, whose claim guards it.
    """
    c = MESSAGES.c
    ids = [bindparam(f"id{n}", type_=c.id.type) for n in range(size)]

    def per_row(name: str, column: Any) -> Any:
        whens = [(c.id == ids[n], bindparam(f"{name}{n}", type_=column.type))
                 for n in range(size)]  # fmt: skip
        return case(*whens, else_=column)

    values: dict[str, object] = {
        "status": new.value,
        "attempts": c.attempts + 1,
        "last_retry": per_row("at", c.last_retry),
        "locked_by": None,
        "locked_at": None,
        "last_error": (
            per_row("error", c.last_error)
            if per_row_error
            else bindparam("error", type_=c.last_error.type)
        ),
    }
    if new is Status.SENT:
        values["sent_at"] = per_row("at", c.sent_at)
    elif new is Status.DEFERRED:
        values["next_attempt_at"] = per_row("due", c.next_attempt_at)
    guard = (c.status == Status.SENDING.value, c.locked_by == bindparam("worker"))
    stmt = update(MESSAGES).where(c.id.in_(ids), *guard).values(**values)
    return stmt.returning(c.id) if returning else stmt


def _settles(done: Finished) -> tuple[Status, Outcome, str | None]:
    """The status an outcome moves its message to, the attempt's outcome and its error.

    A deferral that uses up the last attempt is recorded as the failure it is.
    """
    if done.outcome is Outcome.DEFERRED:
        attempts = done.claim.attempts + 1
        if attempts < done.claim.max_attempts:
            return Status.DEFERRED, Outcome.DEFERRED, done.error
        return Status.FAILED, Outcome.FAILED, f"{done.error} (gave up after {attempts} attempts)"
    new = Status.SENT if done.outcome is Outcome.SENT else Status.FAILED
    return new, done.outcome, done.error


def mark_sent(claim: Claim, now: datetime, note: str | None = None) -> bool:
    """The message went out (note lists recipients the server refused, if any)."""
    return claim.id in record([Finished(claim, Outcome.SENT, now, None, note)])


def mark_failed(claim: Claim, now: datetime, code: int | None, error: str) -> bool:
    """The message will never go out: a permanent refusal or a message that cannot be built."""
    return claim.id in record([Finished(claim, Outcome.FAILED, now, code, error)])


def mark_deferred(
    claim: Claim, now: datetime, code: int | None, error: str, retry: Retry
) -> Status | None:
    """A transient failure: try again later, or fail if the attempts are used up.

    Returns the new status, or None if the claim was no longer this worker's.
    """
    return record([Finished(claim, Outcome.DEFERRED, now, code, error)], retry).get(claim.id)


def renew(claims: Sequence[Claim], now: datetime) -> set[int]:
    """Refresh this worker's claims; return the ids it still holds."""
    if not claims:
        return set()
    worker_id = claims[0].worker_id
    ids = [c.id for c in claims]
    held = (
        Message.id.in_(ids),
        Message.status == Status.SENDING.value,
        Message.locked_by == worker_id,
    )
    stmt = update(Message).where(*held).values(locked_at=now)
    _changed(stmt)
    still = set(db.session.execute(select(Message.id).where(*held)).scalars())
    db.session.commit()
    return still


def _hand_back(worker_id: str, *where: ColumnElement[bool]) -> int:
    """Return this worker's matching claims to waiting, as if never claimed; commit."""
    stmt = (
        update(Message)
        .where(Message.status == Status.SENDING.value, Message.locked_by == worker_id, *where)
        .values(
            status=case((Message.attempts == 0, Status.QUEUED.value), else_=Status.DEFERRED.value),
            locked_by=None,
            locked_at=None,
        )
    )
    count = _changed(stmt)
    db.session.commit()
    return count


def release(claims: Sequence[Claim]) -> int:
    """Hand back claimed messages that were not started, as if never claimed."""
    if not claims:
        return 0
    return _hand_back(claims[0].worker_id, Message.id.in_([c.id for c in claims]))


def release_held(worker_id: str) -> int:
    """Hand back every claim this worker still holds.

    For the start of a pass: a worker's passes never overlap, so a claim it holds
    then was left by an error (a COMMIT whose reply was lost, a pass cut short).
    """
    return _hand_back(worker_id)


def release_stale(lock_timeout: float, now: datetime | None = None) -> int:
    """Take back messages whose claim is older than lock_timeout: their worker died."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=lock_timeout)
    stale = select(
        Message.id, Message.locked_by, Message.locked_at, Message.attempts, Message.max_attempts
    ).where(Message.status == Status.SENDING.value, Message.locked_at < cutoff)
    if db.engine.dialect.name != "sqlite":
        stale = stale.with_for_update(skip_locked=True)
    count = 0
    for row in db.session.execute(stale).all():
        claim = Claim(row.id, row.locked_by, row.attempts, row.max_attempts, row.locked_at)
        error = f"worker lost: claim by {row.locked_by} expired after {lock_timeout:g}s"
        attempts = row.attempts + 1
        new = Status.FAILED if attempts >= row.max_attempts else Status.DEFERRED
        values: dict[str, object] = {} if new is Status.FAILED else {"next_attempt_at": now}
        # _finish commits each one; the guard on locked_by keeps a live owner's
        # outcome from being overwritten.
        if _finish(claim, new, Outcome.WORKER_LOST, now, values, error=error):
            count += 1
    db.session.commit()
    return count


def cancel(message_id: int, now: datetime | None = None) -> None:
    """Cancel a queued or deferred message; MoveRefused otherwise."""
    moved = _move(message_id, sources(Status.CANCELLED), Status.CANCELLED)
    db.session.commit()
    if not moved:
        raise MoveRefused(f"message {message_id} is not queued or deferred")


def resend(message_id: int, allowance: int, now: datetime | None = None) -> None:
    """Queue a failed or cancelled message again, keeping its attempt history.

    It gets a fresh allowance of attempts on top of those already made.
    """
    moved = _move(
        message_id,
        (Status.FAILED, Status.CANCELLED),
        Status.QUEUED,
        next_attempt_at=now or utcnow(),
        max_attempts=Message.attempts + allowance,
    )
    db.session.commit()
    if not moved:
        raise MoveRefused(f"message {message_id} is not failed or cancelled")


def send_now(message_id: int, now: datetime | None = None) -> None:
    """Make a deferred message due at once instead of at its next attempt time."""
    moment = now or utcnow()
    stmt = update(Message).where(Message.id == message_id, Message.status == Status.DEFERRED.value)
    moved = _changed(stmt.values(next_attempt_at=moment)) == 1
    db.session.commit()
    if not moved:
        raise MoveRefused(f"message {message_id} is not deferred")


def resend_all_failed(allowance: int, now: datetime | None = None) -> int:
    """Queue every failed message again; return how many."""
    stmt = (
        update(Message)
        .where(Message.status == Status.FAILED.value)
        .values(
            status=Status.QUEUED.value,
            next_attempt_at=now or utcnow(),
            max_attempts=Message.attempts + allowance,
        )
    )
    count = _changed(stmt)
    db.session.commit()
    return count


def send_again(message_id: int, source: str, max_attempts: int) -> Message:
    """A new queued message with the content and attachments of a sent one."""
    old = db.session.get(Message, message_id)
    if old is None or old.status != Status.SENT.value:
        raise MoveRefused(f"message {message_id} is not sent")
    draft = Draft(
        from_addr=old.from_addr,
        to=_split(old.to_addrs),
        cc=_split(old.cc_addrs),
        bcc=_split(old.bcc_addrs),
        reply_to=old.reply_to,
        subject=old.subject,
        text=old.text_body,
        html=old.html_body,
        headers=dict(old.headers or {}),
        priority=old.priority,
        attachments=[Upload(*found) for found in read_attachments(message_id)],
    )
    return enqueue(draft, source=source, max_attempts=max_attempts)[0]


def _split(addresses: str) -> list[str]:
    """A stored address list back into its addresses."""
    return [str(Address(display_name=n, addr_spec=a)) for n, a in getaddresses([addresses]) if a]
