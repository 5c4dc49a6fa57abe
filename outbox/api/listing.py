"""GET /api/messages: messages newest first, filtered, a page at a time by keyset on id."""

from datetime import datetime
from typing import Any

from flask import Response, current_app, jsonify, request, url_for

from outbox.api.blueprint import Refused, bp
from outbox.core.addresses import Mailbox
from outbox.core.addresses import parse as parse_addresses
from outbox.core.checks import UNSTORABLE_ERROR, unstorable
from outbox.core.schema import utc_moment
from outbox.core.status import Status
from outbox.core.streams import parse as parse_stream
from outbox.models import ID_RANGE
from outbox.ops.reports import Filters, filtered_page
from outbox.queue.wire import MAX_PAGE_LIMIT, PAGE_LIMIT, message_json

PARAMETERS = {"status", "stream", "recipient", "source", "since", "until", "before", "limit"}


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
    if (stream := args.get("stream")) is not None:
        try:
            found["stream"] = parse_stream(stream).value
        except ValueError as exc:
            errors["stream"] = str(exc)
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


@bp.get("/messages")
def list_messages() -> Response:
    """Messages newest first, filtered; `next` is the URL of the next page, or null."""
    filters, before, limit = read_filters(request.args)
    rows, next_before = filtered_page(filters, before, limit)
    args: dict[str, Any] = {**request.args, "before": next_before}
    after = url_for("api.list_messages", **args) if next_before else None
    return jsonify(messages=[message_json(row) for row in rows], next=after)
