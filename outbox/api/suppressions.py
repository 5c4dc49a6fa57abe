"""The suppression list over the API: list and search it, add an address, take one off."""

from datetime import datetime
from typing import Any

from flask import Response, jsonify, request, url_for

from outbox.api.blueprint import Refused, answer_error, bp
from outbox.capabilities.suppression import manage
from outbox.capabilities.suppression.screen import Rejected
from outbox.core import untrusted_json
from outbox.core.checks import UNSTORABLE_ERROR, unstorable

MAX_LIMIT = 500
FIELDS = ("address", "reason", "expires_at")


@bp.errorhandler(Rejected)
def rejected(exc: Rejected) -> Response:
    """OUTBOX_SUPPRESSED=reject: a message (or batch) naming a suppressed address is refused,
    in the shape of the API's other refusals of a message's fields."""
    said = [(f.get("index"), f["field"], f"{f['address']} is {f['reason']}") for f in exc.found]
    if any(index is not None for index, _, _ in said):  # a batch
        listed = [{"index": i, "field": field, "error": text} for i, field, text in said]
        return answer_error(422, "no message of the batch was queued", errors=listed)
    errors: dict[str, str] = {}
    for _, field, text in said:
        errors[field] = f"{errors[field]}; {text}" if field in errors else text
    return answer_error(422, "the message was not queued", errors=errors)


def _whole(name: str, low: int, high: int, errors: dict[str, str]) -> int | None:
    value = request.args.get(name)
    if value is None:
        return None
    if not value.isdigit() or not low <= int(value) <= high:
        errors[name] = f"must be a whole number from {low} to {high}"
        return None
    return int(value)


@bp.get("/suppressions")
def list_suppressions() -> Response:
    """Entries newest first, those whose address holds `q`; `next` is the next page's URL."""
    errors = {
        name: "is not a parameter of this listing"
        for name in request.args
        if name not in ("q", "before", "limit")
    }
    before = _whole("before", 1, 2**63 - 1, errors)
    limit = _whole("limit", 1, MAX_LIMIT, errors) or manage.PAGE
    search = request.args.get("q", "")
    if unstorable(search):
        errors["q"] = UNSTORABLE_ERROR
    if errors:
        raise Refused(422, "the list was not read", errors=errors)
    found = manage.page(search, before, limit)
    after = None
    if found.before is not None:
        args: dict[str, Any] = {**request.args, "before": found.before}
        after = url_for("api.list_suppressions", **args)
    return jsonify(suppressions=[manage.entry_json(e) for e in found.entries], next=after)


def _expiry(at: str | None) -> datetime | None:
    """When the entry expires: null or absent is for good, "" is no time at all."""
    if at is not None and not at.strip():
        raise manage.Invalid("expires_at must be an ISO 8601 date and time, or null for good")
    return manage.expiry(at=at)


def _new_entry(body: dict[str, Any]) -> tuple[str, str, Any]:
    """The address, reason and expiry of a request's body; Refused (422) naming each fault."""
    errors = {name: "is not a field of a suppression" for name in body if name not in FIELDS}
    found: dict[str, Any] = {}
    checks: dict[str, Any] = {
        "address": manage.checked_address,
        "reason": manage.checked_reason,
        "expires_at": _expiry,
    }
    for name, check in checks.items():
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            errors[name] = "must be a string"
            continue
        try:
            found[name] = check(value)
        except manage.Invalid as exc:
            errors[name] = str(exc)
    if errors:
        raise Refused(422, "nothing was added", errors=errors)
    return found["address"], found["reason"], found["expires_at"]


@bp.post("/suppressions")
def create_suppression() -> Response:
    """Suppress an address: 201 with the new entry, 200 with the live one already there."""
    shape = "the body must be a JSON object: {address, reason, expires_at?}"
    try:
        body: Any = untrusted_json.loads(request.get_data()) if request.is_json else None
    except ValueError as exc:
        return answer_error(400, f"{shape}; it {exc}")
    if not isinstance(body, dict):
        return answer_error(400, shape)
    address, reason, expires_at = _new_entry(body)
    entry, new = manage.add(address, reason, expires_at)
    response = jsonify(manage.entry_json(entry))
    response.status_code = 201 if new else 200
    return response


# merge_slashes off: an address that starts with "/" (URL-encoded as %2F, decoded before
# routing) would otherwise be redirected (308) to another address.
@bp.delete("/suppressions/<path:address>", merge_slashes=False)
def delete_suppression(address: str) -> Response:
    """Take an address off the list: 204, or 404 if it was not on it; 422 if malformed."""
    try:
        found = manage.remove(address)
    except manage.Invalid as exc:
        raise Refused(422, "nothing was removed", errors={"address": str(exc)}) from None
    if found is None:
        return answer_error(404, f"{address!r} is not on the suppression list")
    return Response(status=204)
