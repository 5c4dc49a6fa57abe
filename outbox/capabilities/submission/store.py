"""A submitted mail checked line by line and stored as it came, in one transaction.

What outbox adds, on top and nothing else: a Message-ID and a Date when the mail has
none (RFC 6409 8.2 and 8.3 let a submission server add them). What it takes out: the Bcc
and Resent-Bcc fields (the envelope says who gets the mail; the header would tell every
recipient).

A Message-ID queued before is told apart by the envelope: the same sender, recipients
and bytes again is a retry (a client that lost the 250) and gets the earlier answer; the
same sender and bytes to other recipients is the rest of a split delivery (a relay's
recipient limit, or outbox's own 452) and is queued for the recipients not queued yet;
other bytes under it are another mail, refused.
"""

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.header import decode_header, make_header
from email.utils import format_datetime
from typing import Any, cast

from flask import current_app
from sqlalchemy import Table, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from outbox.capabilities.submission import Queued, Refused
from outbox.capabilities.submission.raw import read
from outbox.capabilities.submission.repair import repaired
from outbox.capabilities.suppression import screen
from outbox.core import addresses
from outbox.core.addresses import Kind, Mailbox
from outbox.core.checks import oversize
from outbox.core.recipients import Recipient
from outbox.core.status import Status
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.core.streams import parse as parse_stream
from outbox.models import CHUNK_BYTES, Message, RawChunk, utcnow
from outbox.models.db import db
from outbox.queue import insert_groups, insert_row
from outbox.queue.store import msgid_domain

MAX_LINE = 998  # octets before CRLF (RFC 5322 2.1.1)
FIELD = re.compile(rb"[!-9;-~]+[ \t]*:")  # a field name (RFC 5322 3.6.8; obs-: WSP before :)
BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")
MESSAGE_ID_CHARS = 255  # the messages.message_id column
HIDDEN = frozenset({"bcc", "resent-bcc"})  # fields naming recipients no one else may see
# The field a client names the mail's stream in (core.streams): outbox's, never sent on.
STREAM_FIELD = "x-outbox-stream"

INSERT_RAW = insert(cast(Table, RawChunk.__table__))


def _media(text: str) -> Refused:
    return Refused(554, "5.6.0", text)


def _line_of(data: bytes, at: int) -> int:
    return data.count(b"\n", 0, at) + 1


def checked_lines(data: bytes) -> bytes:
    """The DATA ending in CRLF, or Refused naming the first line SMTP or RFC 5322 forbids."""
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    if (nul := data.find(b"\0")) >= 0:
        raise _media(f"line {_line_of(data, nul)} holds a NUL byte")
    if bare := BARE.search(data):
        which = "CR" if bare.group() == b"\r" else "LF"
        raise _media(
            f"line {_line_of(data, bare.start())} ends with a bare {which}: "
            "every line ends with CRLF (RFC 5321 2.3.8)"
        )
    lines = data.split(b"\r\n")
    if max(map(len, lines)) > MAX_LINE:
        number, line = next((n, x) for n, x in enumerate(lines, 1) if len(x) > MAX_LINE)
        raise _media(
            f"line {number} is {len(line)} octets long; at most {MAX_LINE} are allowed "
            "(RFC 5322 2.1.1)"
        )
    return data


def split_head(data: bytes) -> tuple[list[bytes], bytes]:
    """The header fields (each with its folded lines and CRLF) and the rest, body and all."""
    end = data.find(b"\r\n\r\n")
    head, rest = (data, b"") if end < 0 else (data[: end + 2], data[end + 2 :])
    if data.startswith(b"\r\n"):
        raise _media("the mail has no header fields: it begins with an empty line")
    fields: list[bytes] = []
    for number, line in enumerate(head.split(b"\r\n")[:-1], 1):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += line + b"\r\n"
        elif FIELD.match(line):
            fields.append(line + b"\r\n")
        else:
            shown = line[:60].decode("ascii", "backslashreplace")
            raise _media(f"header line {number} is not a field 'Name: value': {shown!r}")
    return fields, rest


def _name(field: bytes) -> str:
    return field.split(b":", 1)[0].strip().decode("ascii").lower()


def _parsed(field: bytes) -> str:
    """One field's value unfolded, as it came; UTF-8 allowed (RFC 6532), nothing else 8-bit.

    The email package's header objects would read it too, at 140 us a field: most of a
    submission's cost (bench/submission.py); what outbox needs of a field is this much.
    """
    try:
        text = field.decode("utf-8")
    except UnicodeDecodeError:
        raise _media(
            f"the {_name(field).title()} field holds 8-bit octets that are not UTF-8 (RFC 6532)"
        ) from None
    return text.partition(":")[2].replace("\r\n", "").strip()


def _decoded(text: str) -> str:
    """Encoded words (RFC 2047) in text decoded; text as it is if they cannot be."""
    if "=?" not in text:
        return text
    try:
        return str(make_header(decode_header(text)))
    except (LookupError, ValueError, UnicodeDecodeError):
        return text


def _value(fields: list[bytes], name: str) -> str | None:
    found = [f for f in fields if _name(f) == name]
    if len(found) > 1:
        raise _media(f"the mail has {len(found)} {name.title()} fields; RFC 5322 allows one")
    return _parsed(found[0]) if found else None


def _mailboxes(fields: list[bytes], name: str) -> list[tuple[str, str]]:
    """(name, address) pairs named in every field called name, read leniently (display only)."""
    values = [_parsed(f) for f in fields if _name(f) == name]
    return [(_decoded(n), a) for n, a in addresses.listed(values)]


def _one(value: str, allowed: frozenset[str], command: str, status: str) -> Mailbox:
    """An envelope address, checked as the API checks one; Refused naming it if it is not."""
    try:
        found = addresses.parse([value], allowed)
    except ValueError as exc:
        raise Refused(553, status, f"{command} <{value}>: {exc}") from None
    if len(found) != 1 or found[0].name or "<" in value:
        raise Refused(553, status, f"{command}: {addresses.address_error(value)}")
    return found[0]


def _mailbox_key(address: str) -> str:
    """One key for the spellings of one mailbox: the local part exact, the domain's case not."""
    local, _, domain = address.rpartition("@")
    return f"{local}@{domain.lower()}"


def _envelope(sender: str, recipients: list[str]) -> tuple[str, list[Mailbox]]:
    """MAIL FROM's address ("" for the null sender) and the recipients, each once."""
    allowed = current_app.config["ALLOWED_SPECIAL_DOMAINS"]
    # The null sender (a delivery report or an auto-reply passed on): its bounces go
    # nowhere (RFC 5321 4.5.5), so it is sent with MAIL FROM:<> and no VERP return path.
    mail_from = _one(sender, allowed, "MAIL FROM", "5.1.7").address if sender else ""
    found: dict[str, Mailbox] = {}
    for recipient in recipients:
        mailbox = _one(recipient, allowed, "RCPT TO", "5.1.3")
        found.setdefault(_mailbox_key(mailbox.address), mailbox)
    if not found:
        raise Refused(554, "5.5.1", "no recipients")
    return mail_from, list(found.values())


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _from_header(fields: list[bytes]) -> Mailbox:
    value = _value(fields, "from")
    if value is None:
        raise _media("the mail has no From field (RFC 5322 3.6)")
    try:
        found = addresses.parse([value], current_app.config["ALLOWED_SPECIAL_DOMAINS"])
    except ValueError as exc:
        raise _media(f"From: {exc}") from None
    if not found:
        raise _media("the From field names no address")
    return Mailbox(found[0].address, _decoded(found[0].name))


def prepared(sender: str, recipients: list[str], data: bytes, now: datetime) -> dict[str, Any]:
    """The row of a submitted mail, its stored bytes under "raw"; Refused if it cannot go."""
    limit = current_app.config["MAX_MESSAGE_BYTES"]
    if len(data) > limit:
        raise Refused(552, "5.3.4", oversize(limit, len(data)))
    mail_from, envelope = _envelope(sender, recipients)
    fields, body = split_head(checked_lines(repaired(data)))
    author = _from_header(fields)
    message_id = (_value(fields, "message-id") or "").strip()
    added = []
    if not message_id:
        message_id = f"<{secrets.token_hex(16)}@{msgid_domain(author)}>"
        added.append(f"Message-ID: {message_id}\r\n".encode())
    elif len(message_id) > MESSAGE_ID_CHARS:
        raise _media(f"the Message-ID is over {MESSAGE_ID_CHARS} characters long")
    if _value(fields, "date") is None:
        added.append(f"Date: {format_datetime(datetime.now(UTC))}\r\n".encode())
    named = {
        kind: {a.lower(): n for n, a in _mailboxes(fields, kind.value)}
        for kind in (Kind.TO, Kind.CC)
    }
    entries = []
    for mailbox in envelope:
        kind = next((k for k in named if mailbox.address.lower() in named[k]), Kind.BCC)
        name = named.get(kind, {}).get(mailbox.address.lower()) or None
        entries.append(Recipient(kind, mailbox.address, name))
    try:
        stream = parse_stream((_value(fields, STREAM_FIELD) or "").strip() or DEFAULT_STREAM)
    except ValueError as exc:
        raise Refused(550, "5.6.0", f"X-Outbox-Stream: {exc}") from None
    dropped = HIDDEN | {STREAM_FIELD}
    raw = b"".join([*added, *(f for f in fields if _name(f) not in dropped), body])
    subject = " ".join(_decoded(_value(fields, "subject") or "").split())[:998]
    return {
        "message_id": message_id,
        "from_addr": author.address,
        "from_name": author.name[:998],
        "reply_to": None,
        "reply_to_name": "",
        "recipients": entries,
        "subject": subject,
        "text_body": None,
        "html_body": None,
        "headers": None,
        "priority": 0,
        "stream": stream.value,
        "send_after": None,
        "status": Status.QUEUED.value,
        "attempts": 0,
        "max_attempts": current_app.config["MAX_ATTEMPTS"],
        "next_attempt_at": now,
        "created_at": now,
        "attachment_count": 0,
        "resent_from": None,
        # The mail, sender and bytes: what a part of a split delivery has in common with
        # the parts before it.
        "request_hash": _digest(mail_from.encode(), data),
        "part": "",  # the first under its Message-ID; _queued_before names a later one
        "raw_size": len(raw),
        "envelope_from": mail_from,
        "raw": raw,
    }


def queue_raw(
    sender: str, recipients: list[str], data: bytes, *, source: str, **values: Any
) -> Queued:
    """submission.queue_raw: see there. values: columns set otherwise than for a
    new submission (a copy's resent_from and max_attempts)."""
    now = utcnow()
    row = prepared(sender, recipients, data, now)
    raw = row.pop("raw")
    row.update(source=source, **values)
    return _queued(row, raw, now)


@dataclass(frozen=True)
class Submitted:
    """A mail as the SMTP transaction handed it over: what queue_raw takes."""

    sender: str
    recipients: list[str]
    data: bytes
    source: str


def queue_many(mails: Sequence[Submitted]) -> list[Queued | Exception]:
    """Store mails handed over at once (several connections' DATA), all in one transaction.

    Each mail gets what queue_raw would answer for it alone: its Queued, or the exception
    it would raise (Refused, a database error). A mail refused leaves the others to go
    on; if the one transaction cannot be written because of one mail (a Message-ID queued
    before, a recipient refused as suppressed), each is stored alone, as queue_raw does.
    """
    now = utcnow()
    answers: list[Queued | Exception | None] = [None] * len(mails)
    rows: list[dict[str, Any]] = []
    raws: list[bytes] = []
    taken: list[int] = []
    for n, mail in enumerate(mails):
        try:
            row = prepared(mail.sender, mail.recipients, mail.data, now)
        except Refused as exc:
            answers[n] = exc
            continue
        raws.append(row.pop("raw"))
        row["source"] = mail.source
        rows.append(row)
        taken.append(n)
    try:
        # One mail alone takes queue_raw's path: a multi-row INSERT costs it more.
        stored: list[Queued] | None = _stored_together(rows, raws, now) if len(rows) > 1 else None
    except (IntegrityError, screen.Rejected):
        stored = None  # rolled back: one of them is told apart below
    except Exception as exc:  # the database: every mail of the transaction gets it
        stored = None
        for n in taken:
            answers[n] = exc
    for k, n in enumerate(taken):
        if stored is not None:
            answers[n] = stored[k]
        elif answers[n] is None:
            try:
                answers[n] = _queued(rows[k], raws[k], now)
            except (Refused, SQLAlchemyError) as exc:
                answers[n] = exc
    return [answer for answer in answers if answer is not None]


def _queued(row: dict[str, Any], raw: bytes, now: datetime) -> Queued:
    """A prepared mail stored alone, or the earlier answer for a retry of it, or its part
    of a split delivery stored."""
    try:
        return _stored(row, raw, now)
    except IntegrityError:  # its Message-ID was queued before
        if (earlier := _queued_before(row)) is not None:
            return earlier
    try:
        return _stored(row, raw, now)  # the rest of a split delivery, a part of its own
    except IntegrityError:  # that part was queued meanwhile: its retry raced it
        if (earlier := _queued_before(row)) is not None:
            return earlier
        raise


def _stored(row: dict[str, Any], raw: bytes, now: datetime) -> Queued:
    """row and its raw bytes inserted in one transaction; IntegrityError, rolled back, if
    its (message_id, part) is there already."""
    row = dict(row)  # the suppression marks are this insert's, not the next one's
    try:
        marked = screen.screen([row], now)
    except screen.Rejected as exc:
        raise Refused(550, "5.7.1", str(exc)) from None
    try:
        pk = insert_row(row)
        db.session.execute(INSERT_RAW, _chunks(pk, raw))
        if marked:
            screen.announce([(pk, row)], now)
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        raise
    return Queued(pk, row["message_id"])


def _stored_together(rows: list[dict[str, Any]], raws: list[bytes], now: datetime) -> list[Queued]:
    """Each row and its raw bytes inserted, then one commit; rolled back and raised if any
    cannot be (IntegrityError, screen.Rejected, a database error)."""
    rows = [dict(row) for row in rows]  # as _stored: the marks are this insert's
    try:
        marked = screen.screen(rows, now)
        ids = insert_groups(rows, [range(len(rows))])
        db.session.execute(INSERT_RAW, [c for pk, raw in zip(ids, raws, strict=True)
                                        for c in _chunks(pk, raw)])  # fmt: skip
        if marked:
            screen.announce([(ids[n], rows[n]) for n in marked], now)
        db.session.commit()
    except BaseException:
        db.session.rollback()
        raise
    return [Queued(pk, row["message_id"]) for pk, row in zip(ids, rows, strict=True)]


def _chunks(pk: int, raw: bytes) -> list[dict[str, Any]]:
    """The rows of raw_chunks that hold a mail's bytes."""
    return [{"message_pk": pk, "seq": seq, "data": raw[start : start + CHUNK_BYTES]}
            for seq, start in enumerate(range(0, len(raw), CHUNK_BYTES))]  # fmt: skip


def _queued_before(row: dict[str, Any]) -> Queued | None:
    """The answer for a mail whose Message-ID was queued before, or None to queue row.

    Another mail under it is Refused. A retry is answered with the part it queued (or,
    grouped otherwise, the part holding its first recipient). The rest of a split
    delivery leaves row with the recipients no earlier part has, as the part its
    envelope names.
    """
    found = db.session.execute(
        select(Message.id, Message.source, Message.request_hash, Message.part,
               Message.recipients)
        .where(Message.message_id == row["message_id"]).order_by(Message.id)
    ).all()  # fmt: skip
    db.session.commit()
    if not found:
        return None
    mail = (row["source"], row["request_hash"])
    if other := next((e for e in found if (e.source, e.request_hash) != mail), None):
        raise _media(
            f"Message-ID {row['message_id']} was queued already for another mail "
            f"(outbox message {other.id}); give each mail a Message-ID of its own"
        )
    if not row["part"]:  # the transaction's own recipients, before any is left out
        addresses = sorted(_mailbox_key(e.address).encode() for e in row["recipients"])
        row["part"] = _digest(row["request_hash"].encode(), *addresses)
    if retried := next((e for e in found if e.part == row["part"]), None):
        return Queued(retried.id, row["message_id"])
    held: dict[str, int] = {}
    for earlier in found:
        for entry in earlier.recipients:
            held.setdefault(_mailbox_key(entry.address), earlier.id)
    rest = [e for e in row["recipients"] if _mailbox_key(e.address) not in held]
    if not rest:
        return Queued(held[_mailbox_key(row["recipients"][0].address)], row["message_id"])
    row["recipients"] = rest
    return None


def copied(old: Message, source: str, max_attempts: int) -> Message:
    """A sent raw mail queued again (staff's "Send again"): its bytes with a new Message-ID,
    to every recipient it had."""
    assert old.raw_size is not None and old.envelope_from is not None
    fields, body = split_head(read(old.id, old.raw_size))
    data = b"".join([*(f for f in fields if _name(f) != "message-id"), body])
    recipients = [entry.address for entry in old.recipients]
    queued = queue_raw(old.envelope_from, recipients, data, source=source,
                       max_attempts=max_attempts, resent_from=old.id,
                       stream=old.stream)  # fmt: skip
    return db.session.get_one(Message, queued.id)
