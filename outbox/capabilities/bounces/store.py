"""Taking a bounce mail in: kept raw first, then read, matched to its message, and applied.

A hard bounce marks the recipient's entry "bounced" with the DSN status and the remote
server's words (the message's status stays: it was sent, and a recipient that bounced
later is not a status move), suppresses the address, and emits recipient.bounced. A
soft bounce is recorded and shown, nothing more. What cannot be read or matched stays
in the bounce inbox.

A complaint (an ARF feedback report, matched by VERP, the returned Message-ID, then the
Feedback-ID) marks its recipient "complained" if it was sent, suppresses the address
(source complaint), and emits recipient.complained.

A hard bounce or a complaint can come before the worker has recorded the send it returns:
outcomes are recorded in groups, and a server may bounce within milliseconds. Such a
report waits (BounceMail.waiting) and is applied in the transaction that records its
recipient's outcome (apply_waiting, a hook of queue.record): marked if the recipient was
sent, still waiting if it was deferred (a later attempt may send it), left as on time if
it failed.
"""

import functools
import hashlib
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from flask import current_app
from sqlalchemy import CursorResult, Executable, Table, Text, bindparam, delete, select, true
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError

from outbox import queue
from outbox.auth import audit
from outbox.capabilities import suppression
from outbox.capabilities.bounces import feedback, parse, verp
from outbox.capabilities.guardrails import hours as guardrail_hours
from outbox.capabilities.webhooks import events
from outbox.core.addresses import listed
from outbox.core.recipients import Recipient, State, moved, state
from outbox.core.status import Status
from outbox.mail import feedback_id
from outbox.models import BounceMail, Message, utcnow
from outbox.models.db import db
from outbox.models.drivers import UNREACHABLE

log = logging.getLogger("outbox.bounces")
# Where a recipient stands when its bounce comes before its send is recorded.
EARLY = (State.PENDING, State.DEFERRED)
HELD = (Status.QUEUED, Status.SENDING)  # a worker may write the recipients column
PURGE_BATCH = 500
SETTLED = (parse.HARD, parse.SOFT, parse.OTHER, parse.COMPLAINT)  # the kinds matched
BOUNCES = cast(Table, BounceMail.__table__)
# Every recipient of a message sees its Message-ID (and Feedback-ID), and could write a
# "bounce" or a "complaint" naming another recipient. With VERP on, a real bounce comes
# to the recipient's own return path, and a real complaint returns it.
FORGEABLE = ("matched by its Message-ID alone: with VERP on, only a bounce to the "
             "recipient's own return path marks it")  # fmt: skip
FORGEABLE_COMPLAINT = ("matched by its {} alone: with VERP on, only a complaint naming the "
                       "recipient's own return path marks it")  # fmt: skip
# Nothing answers a mail sent with MAIL FROM:<> (RFC 5321 4.5.5); a "bounce" of one is
# someone's mistake or a forgery, and marks nothing.
NULL_SENDER = "its message went with the null sender (MAIL FROM:<>), which takes no bounces"
NONE_LEFT = "no recipient of the message was left to mark as bounced"
NOT_SENT = "its recipient stands {}, not sent: nothing to mark as complained"
UNNAMED = ("names no recipient of the message (the provider may have redacted it), and the "
           "message has more than one")  # fmt: skip
MATCHED_BY = {"message-id": "Message-ID", "feedback-id": "Feedback-ID"}
WAITING = "came before its recipient's send was recorded: applied when it is"
APPLIED_LATE = "came before its recipient's send was recorded: applied when it was"


def verp_on() -> bool:
    return bool(current_app.config.get("BOUNCE_ADDRESS"))


def save(raw: bytes, via: str, envelope_from: str | None = None,
         envelope_to: Iterable[str] = ()) -> tuple[int, bool]:  # fmt: skip
    """Store the raw mail and commit; its id, and False if the same mail was stored before."""
    digest = hashlib.sha256(raw).hexdigest()
    found = db.session.scalar(select(BounceMail.id).where(BounceMail.digest == digest))
    if found is not None:
        return found, False
    row = BounceMail(received_at=utcnow(), via=via, digest=digest, size=len(raw), raw=raw,
                     envelope_from=(envelope_from or "")[:998] or None,
                     envelope_to="\n".join(envelope_to) or None, kind="new", subject="",
                     from_header="")  # fmt: skip
    db.session.add(row)
    try:
        db.session.commit()
    except IntegrityError:  # stored meanwhile by another process
        db.session.rollback()
        return db.session.scalars(
            select(BounceMail.id).where(BounceMail.digest == digest)
        ).one(), False
    return row.id, True


def take_in(raw: bytes, via: str, envelope_from: str | None = None,
            envelope_to: Iterable[str] = ()) -> int:  # fmt: skip
    """Store a mail, then read and apply it; its id. Only the storing may raise."""
    pk, new = save(raw, via, envelope_from, list(envelope_to))
    if new:
        process_safely(pk)
    return pk


def process_safely(pk: int) -> None:
    """process(), but a failure leaves the mail in the inbox as unparsed, with the reason."""
    try:
        process(pk)
    except Exception as exc:
        db.session.rollback()
        log.exception("bounce mail %d could not be processed", pk)
        row = db.session.get(BounceMail, pk)
        if row is not None:
            row.kind, row.processed_at = parse.UNPARSED, utcnow()
            row.note = f"could not be processed: {type(exc).__name__}: {exc}"[:2000]
            db.session.commit()


def process_waiting(limit: int = 100) -> int:
    """Process mails stored but never read (the process stopped in between); how many."""
    waiting = db.session.scalars(
        select(BounceMail.id).where(BounceMail.kind == "new").order_by(BounceMail.id).limit(limit)
    ).all()
    for pk in waiting:
        process_safely(pk)
    return len(waiting)


def process(pk: int) -> BounceMail:
    """Read one stored mail, match it to its message, apply it; commit."""
    row = db.session.get(BounceMail, pk)
    if row is None:
        raise LookupError(f"no bounce mail {pk}")
    found = parse.read(row.raw)
    row.kind, row.subject, row.from_header = found.kind, found.subject, found.from_header
    row.results = [
        {"address": f.address, "action": f.action, "status": f.status,
         "diagnostic": f.diagnostic, "hard": f.hard}
        for f in found.failures
    ]  # fmt: skip
    first = next(
        (f for f in found.failures if f.hard), found.failures[0] if found.failures else None
    )
    if first is not None:
        row.recipient, row.status = first.address[:998], first.status
        row.diagnostic = first.diagnostic
    if found.complaint is not None:
        _note_complaint(row, found.complaint)
    row.processed_at = utcnow()
    marked = _settle(row, found) if found.kind in SETTLED else []
    db.session.commit()
    if marked:
        audit.record(*_told(found.kind, marked, pk, row.message_pk))
    return row


def _note_complaint(row: BounceMail, complaint: feedback.Complaint) -> None:
    """What the inbox shows of a complaint: its recipient, its type, who reported it."""
    by = f"reported by {complaint.user_agent}" if complaint.user_agent else None
    row.recipient, row.status, row.diagnostic = complaint.recipient, complaint.feedback_type, by
    row.results = [{"address": complaint.recipient, "action": "complained",
                    "status": complaint.feedback_type, "diagnostic": by,
                    "hard": False}]  # fmt: skip


def _settle(row: BounceMail, found: parse.Read) -> list[str]:
    """Match a report to its message, apply a hard bounce or a complaint; the addresses marked."""
    row.waiting = False  # until _apply finds a recipient that may yet be sent
    message, index, row.matched_by = _match(found, (row.envelope_to or "").splitlines())
    if message is None:
        row.note = "no message of outbox matches its return path or Message-ID"
        return []
    row.message_pk = message.id
    if found.kind not in (parse.HARD, parse.COMPLAINT):
        return []
    if found.kind == parse.HARD and message.envelope_from == "":
        row.note = NULL_SENDER
        return []
    if row.matched_by != "verp" and verp_on():
        by = MATCHED_BY.get(row.matched_by or "", row.matched_by)
        row.note = FORGEABLE_COMPLAINT.format(by) if found.complaint else FORGEABLE
        return []
    if found.complaint is not None:
        return _complain(row, _locked(message.id), index, found.complaint)
    return _apply(row, _locked(message.id), index, found.failures)


def _told(
    kind: str, marked: list[str], pk: int, message_pk: int | None
) -> tuple[str, int | None, str]:
    """The audit event of a report applied: its action, its message, what it says."""
    action, done = ("complaint", "complained") if kind == parse.COMPLAINT else ("bounce", "bounced")
    return action, message_pk, f"{done}: {', '.join(marked)} (bounce mail #{pk})"


def _locked(pk: int) -> Message:
    """The message read afresh under its row lock, held until the commit.

    A worker recording the message's outcome locks the row with its UPDATE, so either
    this bounce's decision is committed first (a waiting bounce the worker's hook then
    reads: READ COMMITTED shows it to a statement after the lock), or the outcome is,
    and this read shows it. SQLite has no row locks; the write lock that the flush
    takes stands for one.
    """
    db.session.flush()
    stmt = select(Message).where(Message.id == pk).with_for_update()
    return db.session.scalars(stmt.execution_options(populate_existing=True)).one()


def apply_waiting(statuses: Mapping[int, Status]) -> None:
    """Apply the bounces that waited for these messages' outcomes, in the transaction
    that records them (queue.on_recorded): the recording worker holds the rows, so once."""
    if not statuses:
        return
    found = db.session.execute(_waiting(), {"lo": min(statuses), "hi": max(statuses)})
    for pk, message_pk in found.all():
        if message_pk in statuses:
            _apply_late(pk)


@functools.cache
def _waiting() -> Executable:
    """The waiting bounces of the messages with ids from lo to hi.

    Run for every group of outcomes a worker records: a range on the index of the
    waiting (few, if any) costs little more than a round trip, where an IN of a group's
    hundred ids cost a millisecond more on MariaDB, three on PostgreSQL (bench/bouncewait.py).
    """
    c = BOUNCES.c
    return select(c.id, c.message_pk).where(
        c.waiting == true(), c.message_pk.between(bindparam("lo"), bindparam("hi"))
    )


def _apply_late(pk: int) -> None:
    """Apply one waiting bounce in a savepoint: a bounce that cannot be read again must
    not undo the outcomes being recorded; it stays waiting, and the log says why."""
    try:
        with db.session.begin_nested():
            row = db.session.get(BounceMail, pk, populate_existing=True)
            if row is None or not row.waiting:
                return
            found = parse.read(row.raw)
            marked = _settle(row, found)
            if marked:
                row.note = WAITING if row.waiting else APPLIED_LATE
                audit.add(*_told(found.kind, marked, pk, row.message_pk))
    except UNREACHABLE:
        raise  # the database's trouble: the recording is tried again as a whole
    except Exception:
        log.exception("waiting bounce mail %d could not be applied", pk)


def _match(
    found: parse.Read, envelope_to: list[str]
) -> tuple[Message | None, int | None, str | None]:
    """The message a bounce or complaint returns and its recipient's index: by VERP, then
    by Message-ID, then (a complaint) by Feedback-ID."""
    config = current_app.config
    bounce_address = config.get("BOUNCE_ADDRESS")
    complaint = found.complaint
    named = _named(found)
    if bounce_address:
        # A complaint comes to the address given to the provider's feedback loop: the
        # return path is the one its report names, or the returned mail's Return-Path.
        returned = [complaint.mail_from, complaint.return_path] if complaint else []
        for _, address in listed([*envelope_to, *found.to_headers, *filter(None, returned)]):
            target = verp.target(address, bounce_address, current_app.secret_key or "")
            if target is None:
                continue
            message = db.session.get(Message, target.message_pk)
            if message is not None and target.index < len(message.recipients):
                return message, target.index, "verp"
    if found.message_id:
        bare = found.message_id.strip().strip("<>")
        wanted = [f"<{bare}>", bare]
        rows = db.session.scalars(
            select(Message).where(Message.message_id.in_(wanted)).order_by(Message.id)
        ).all()
        message = _part_of(list(rows), named)
        if message is not None:
            return message, None, "message-id"
    names = feedback_id.read(complaint.feedback_id) if complaint else None
    if names is not None:
        message = _of_feedback_id(names, named)
        if message is not None:
            return message, None, "feedback-id"
    return None, None, None


def _named(found: parse.Read) -> list[str]:
    """The recipients a bounce or complaint names, the ones it reports failed first."""
    if found.complaint is not None:
        return [found.complaint.recipient] if found.complaint.recipient else []
    failures = found.failures
    return [f.address for f in failures if f.hard] or [f.address for f in failures]


def _of_feedback_id(names: feedback_id.FeedbackId, named: list[str]) -> Message | None:
    """The message a Feedback-ID of outbox names: the message itself, or of a mailing's
    (one recipient each), the one to the recipient the complaint names."""
    if names.kind == feedback_id.MESSAGE:
        return db.session.get(Message, names.pk)
    if not named:
        return None
    local = named[0].rpartition("@")[0]
    rows = db.session.scalars(
        select(Message).where(Message.mailing_id == names.pk,
                              sql_cast(Message.recipients, Text).contains(local, autoescape=True))
        .order_by(Message.id).limit(100)
    ).all()  # fmt: skip
    return next((m for m in rows if any(_same(named[0], e.address) for e in m.recipients)), None)


def _part_of(rows: list[Message], named: list[str]) -> Message | None:
    """Of the rows sharing a Message-ID (the parts of a mail handed over in several SMTP
    transactions), the one sent to a recipient the bounce names; else the first."""
    for message in rows:
        if any(_same(a, e.address) for a in named for e in message.recipients):
            return message
    return rows[0] if rows else None


def _same(one: str, other: str) -> bool:
    """Whether two addresses are one mailbox, as the suppression list matches them."""
    try:
        return suppression.key_of(one) == suppression.key_of(other)
    except ValueError:
        return False


def _apply(row: BounceMail, message: Message, index: int | None,
           failures: list[parse.Failure]) -> list[str]:  # fmt: skip
    """Mark the bounced recipients of message; the addresses marked."""
    entries: list[Recipient] = list(message.recipients)
    hard = [f for f in failures if f.hard]
    chosen: dict[int, parse.Failure] = {}
    if index is not None:  # VERP named the recipient; the report says how it failed
        chosen[index] = next((f for f in hard if _same(f.address, entries[index].address)), hard[0])
    else:
        for failure in hard:
            for i, entry in enumerate(entries):
                if _same(failure.address, entry.address):
                    chosen.setdefault(i, failure)
    now, marked, early = utcnow(), [], False
    for i, failure in chosen.items():
        found = state(entries[i], message.status)
        if found in EARLY or (found is State.SENT and message.status in HELD):
            early = True  # it may yet be sent, or a worker holds the column: apply_waiting
            continue
        if found is not State.SENT:
            continue  # refused at SMTP, suppressed, failed, or bounced already
        own = entries[i].attempts
        entries[i] = moved(entries[i], message.status, State.BOUNCED, dsn=failure.status,
                           reply=failure.said, code=failure.smtp_code or None,
                           attempts=message.attempts if own is None else own)  # fmt: skip
        marked.append(entries[i].address)
    row.waiting = early
    if not marked:
        row.note = WAITING if early else NONE_LEFT
        return []
    # The row is locked (_locked); the guard holds the write to the statuses it expects.
    if not queue.write_recipients(message.id, (Status.SENT, Status.DEFERRED), entries):
        row.note = "the message was being sent again; the recipient was not marked"
        return []
    for i in chosen:
        if entries[i].address in marked:
            _bounced(row, message, entries[i].address, chosen[i], now)
    guardrail_hours.returned(message, now, bounced=len(marked))
    return marked


def _complain(row: BounceMail, message: Message, index: int | None,
              complaint: feedback.Complaint) -> list[str]:  # fmt: skip
    """Mark the recipient a complaint is of as complained; the address marked, if it was."""
    entries: list[Recipient] = list(message.recipients)
    if index is None:
        index = _complained_of(entries, complaint)
    if index is None:
        row.note = UNNAMED
        return []
    found = state(entries[index], message.status)
    if found in EARLY or (found is State.SENT and message.status in HELD):
        row.waiting, row.note = True, WAITING  # it may yet be sent, or a worker holds it
        return []
    if found is not State.SENT:
        row.note = NOT_SENT.format(found)
        return []
    own, address = entries[index].attempts, entries[index].address
    entries[index] = moved(entries[index], message.status, State.COMPLAINED, reply=complaint.said,
                           attempts=message.attempts if own is None else own)  # fmt: skip
    if not queue.write_recipients(message.id, (Status.SENT, Status.DEFERRED), entries):
        row.note = "the message was being sent again; the recipient was not marked"
        return []
    row.recipient = row.recipient or address
    events.emit(events.COMPLAINED, message_pk=message.id, message_id=message.message_id,
                recipient=address, text=complaint.said, at=utcnow())  # fmt: skip
    suppression.add(address, complaint.said, "complaint", message_pk=message.id, bounce_pk=row.id)
    guardrail_hours.returned(message, utcnow(), complained=1)
    return [address]


def _complained_of(entries: list[Recipient], complaint: feedback.Complaint) -> int | None:
    """The index of the recipient a complaint names; providers that redact it leave only a
    message of one recipient (a mailing's) to say whose it is."""
    if complaint.recipient:
        found = next((i for i, e in enumerate(entries) if _same(complaint.recipient, e.address)),
                     None)  # fmt: skip
        if found is not None:
            return found
    return 0 if all(_same(entries[0].address, e.address) for e in entries) else None


def _bounced(row: BounceMail, message: Message, address: str, failure: parse.Failure,
             now: datetime) -> None:  # fmt: skip
    """What follows a hard bounce besides the mark: the event and the suppression."""
    events.emit(events.BOUNCED, message_pk=message.id, message_id=message.message_id,
                recipient=address, code=failure.smtp_code, text=failure.diagnostic,
                at=now, dsn=failure.status)  # fmt: skip
    reason = " ".join(filter(None, [failure.status, failure.diagnostic])) or "hard bounce"
    suppression.add(address, reason[:500], "bounce", message_pk=message.id, bounce_pk=row.id)


def purge_old(cutoff: datetime) -> int:
    """Remove bounce mails received before cutoff, in batches; how many (retention)."""
    removed = 0
    while True:
        ids = db.session.scalars(select(BounceMail.id).where(BounceMail.received_at < cutoff)
                                 .limit(PURGE_BATCH)).all()  # fmt: skip
        if not ids:
            return removed
        result = db.session.execute(delete(BounceMail).where(BounceMail.id.in_(ids)))
        removed += cast(CursorResult[Any], result).rowcount
        db.session.commit()
