"""GET /api/messages: messages newest first, filtered, a page at a time by keyset on id."""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Response, current_app, jsonify, request, url_for
from sqlalchemy import Select, Text, cast, func, or_, select
from sqlalchemy.orm import load_only

from outbox.api.blueprint import Refused, bp
from outbox.core.addresses import Mailbox
from outbox.core.addresses import parse as parse_addresses
from outbox.core.checks import UNSTORABLE_ERROR, unstorable
from outbox.core.schema import utc_moment
from outbox.core.status import Status
from outbox.models import Message
from outbox.models.db import db
from outbox.ops.reports import with_status
from outbox.queue.wire import MAX_PAGE_LIMIT, PAGE_LIMIT, message_json

# A page filtered by recipient, source or time reads at most this many ids: no index
# serves those filters in id order (the recipients are a JSON column), and a rare one
# would otherwise scan the whole table. Such a page may hold fewer messages than its
# limit, or none, and still have a next link: the client follows it to older ids.
# The status filter alone reads ix_messages_status_id and needs no window.
WINDOW = 50_000
ID_RANGE = range(1, 2**63)
# What an answer shows of a message; never its bodies or headers.
SHOWN = (
    Message.id, Message.message_id, Message.status, Message.from_addr, Message.from_name,
    Message.reply_to, Message.reply_to_name, Message.recipients, Message.subject,
    Message.priority, Message.attempts, Message.max_attempts, Message.created_at,
    Message.send_after, Message.next_attempt_at, Message.last_retry, Message.last_error,
    Message.sent_at,
)  # fmt: skip
PARAMETERS = {"status", "recipient", "source", "since", "until", "before", "limit"}


@dataclass(frozen=True)
class Filters:
    """What a listing asks for; None for a filter not given."""

    status: str | None = None
    recipient: Mailbox | None = None
    source: str | None = None
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before

    @property
    def windowed(self) -> bool:
        """Whether a filter that no index serves in id order is given (see WINDOW)."""
        return any(v is not None for v in (self.recipient, self.source, self.since, self.until))


def _moment(value: str) -> datetime | None:
    # A "+01:00" offset left unencoded in a query string arrives as " 01:00".
    return utc_moment(value.replace(" ", "+") if "T" in value else value)


def read_filters(args: Any) -> tuple[Filters, int | None, int]:
    """The filters, before id and limit of a query string; Refused (422) naming each fault."""
    errors: dict[str, str] = {name: "is not a parameter of this listing"
                              for name in args if name not in PARAMETERS}  # fmt: skip
    found: dict[str, Any] = {}
    status = args.get("status")
    if status is not None and status not in set(Status):
        errors["status"] = f"must be one of {', '.join(Status)}"
    found["status"] = status
    if (recipient := args.get("recipient")) is not None:
        try:
            found["recipient"] = _one_mailbox(recipient)
        except ValueError as exc:
            errors["recipient"] = str(exc)
    found["source"] = args.get("source")
    if found["source"] is not None and unstorable(found["source"]):
        errors["source"] = UNSTORABLE_ERROR  # PostgreSQL refuses NUL even to compare
    for name in ("since", "until"):
        if (value := args.get(name)) is not None:
            try:
                found[name] = _moment(value)
            except ValueError as exc:
                errors[name] = str(exc)
            if not value.strip():  # `until=` is no time, not the lack of a filter
                errors[name] = "must be an ISO 8601 date and time; leave it out for none"
    before = _whole(args, "before", ID_RANGE, errors)
    limit = _whole(args, "limit", range(1, MAX_PAGE_LIMIT + 1), errors)
    if errors:
        raise Refused(422, "the messages were not listed", errors=errors)
    return Filters(**found), before, PAGE_LIMIT if limit is None else limit


def _one_mailbox(value: str) -> Mailbox:
    found = parse_addresses([value], frozenset(current_app.config["ALLOWED_SPECIAL_DOMAINS"]))
    if len(found) != 1:
        raise ValueError(f"takes one address, got {len(found)}")
    return found[0]


def _whole(args: Any, name: str, allowed: range, errors: dict[str, str]) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if not value.isdigit() or int(value) not in allowed:
        errors[name] = f"must be a whole number from {allowed.start} to {allowed.stop - 1}"
        return None
    return int(value)


def _matching(filters: Filters) -> Select[Any]:
    """The messages of the filters, in SQL; a recipient's is a superset, checked in _has."""
    stmt = select(Message).options(load_only(*SHOWN))
    if filters.status is not None:
        stmt = with_status(stmt, filters.status)  # ix_messages_status_id, on MariaDB too
    if filters.source is not None:
        stmt = stmt.where(Message.source == filters.source)
    if filters.since is not None:
        stmt = stmt.where(Message.created_at >= filters.since)
    if filters.until is not None:
        stmt = stmt.where(Message.created_at < filters.until)
    if filters.recipient is not None:
        # The address as a JSON string, escaped (as the column is written) or not; the
        # case a LIKE folds, or spacing, is settled by _has on the rows it finds.
        address = filters.recipient.address
        quoted = {json.dumps(address), json.dumps(address, ensure_ascii=False)}
        text = cast(Message.recipients, Text)
        stmt = stmt.where(or_(*(text.contains(q, autoescape=True) for q in quoted)))
    return stmt


def _has(message: Message, filters: Filters) -> bool:
    """Whether a row the SQL found names the recipient asked for, exactly."""
    if filters.recipient is None:
        return True
    return any(e["address"] == filters.recipient.address for e in message.recipients)


def find_page(filters: Filters, before: int | None, limit: int) -> tuple[list[Message], int | None]:
    """A page of messages newest first (highest id), and the before id of the next, if any."""
    stmt = _matching(filters)
    if before is not None:
        stmt = stmt.where(Message.id < before)
    floor = None
    if filters.windowed:
        top = before if before is not None else (db.session.scalar(func.max(Message.id)) or 0) + 1
        floor = max(top - WINDOW, 1)
        stmt = stmt.where(Message.id >= floor)
    stmt = stmt.order_by(Message.id.desc()).limit(limit + 1)
    rows: list[Message] = list(db.session.scalars(stmt))
    if len(rows) > limit:
        return [r for r in rows[:limit] if _has(r, filters)], rows[limit - 1].id
    found = [r for r in rows if _has(r, filters)]
    return found, floor if floor is not None and floor > 1 else None


@bp.get("/messages")
def list_messages() -> Response:
    """Messages newest first, filtered; `next` is the URL of the next page, or null."""
    filters, before, limit = read_filters(request.args)
    rows, next_before = find_page(filters, before, limit)
    args: dict[str, Any] = {**request.args, "before": next_before}
    after = url_for("api.list_messages", **args) if next_before else None
    return jsonify(messages=[message_json(row) for row in rows], next=after)
