"""The suppression list by hand: checked adds and removals with their audit, pages, CSV in and out.

The pages, the API and the CLI all come through here, so each says the same thing
about the same mistake.
"""

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import func, select

from outbox.auth import audit
from outbox.capabilities import suppression
from outbox.core.addresses import LINE_BREAK, parse
from outbox.core.checks import UNSTORABLE_ERROR, unstorable
from outbox.core.schema import utc_moment
from outbox.models import ID_RANGE, Suppression, utcnow
from outbox.models.db import db
from outbox.queue.wire import iso

PAGE = 50  # entries on one page of the list
MAX_REASON = suppression.REASON_CHARS
# A cell a spreadsheet would run as a formula (OWASP's CSV injection) is exported after
# a "'", which the import takes off again: a reason of SMTP text is not for running.
FORMULA = ("=", "+", "-", "@", "\t", "\r")
CSV_FIELDS = (
    "address",
    "reason",
    "source",
    "created_at",
    "expires_at",
    "created_by",
    "message_pk",
    "bounce_pk",
)


class Invalid(ValueError):
    """What a person gave cannot be taken: the text names each problem."""


def checked_address(value: str) -> str:
    """One address as a person gave it (a display name may come with it); Invalid if not one."""
    value = (value or "").strip()
    if not value:
        raise Invalid("give an address")
    if unstorable(value):
        raise Invalid(UNSTORABLE_ERROR)
    allowed = frozenset(current_app.config["ALLOWED_SPECIAL_DOMAINS"])
    try:
        found = parse([value], allowed)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if len(found) != 1:
        raise Invalid(f"give one address, not {len(found)}")
    return found[0].address


def checked_reason(value: str | None) -> str:
    reason = (value or "").strip()
    if not reason:
        raise Invalid("give a reason")
    if unstorable(reason):
        raise Invalid(UNSTORABLE_ERROR)
    if len(reason) > MAX_REASON or LINE_BREAK.search(reason):
        raise Invalid(f"the reason is one line of at most {MAX_REASON} characters")
    return reason


def expiry(days: Any = None, at: Any = None, now: datetime | None = None) -> datetime | None:
    """When an entry given for days, or until at (ISO 8601), expires; None for good."""
    now = now or utcnow()
    if days not in (None, ""):
        try:
            count = int(days)
        except (TypeError, ValueError):
            raise Invalid("days must be a whole number") from None
        if not 1 <= count <= 36500:
            raise Invalid("days must be from 1 to 36500")
        return now + timedelta(days=count)
    try:
        moment = utc_moment(at)
    except ValueError as exc:
        raise Invalid(f"expires_at: {exc}") from None
    if moment is not None and moment <= now:
        raise Invalid("expires_at must be in the future")
    return moment


def add(
    address: str, reason: str | None, expires_at: datetime | None = None, source: str = "manual"
) -> tuple[Suppression, bool]:
    """Suppress an address by hand, committed and audited; the entry and whether it is new."""
    entry, new = suppression.add(
        checked_address(address), checked_reason(reason), source, expires_at=expires_at
    )
    db.session.commit()
    if new:
        audit.record(
            "suppress",
            entry.message_pk,
            {
                "address": entry.address,
                "reason": entry.reason,
                "expires_at": entry.expires_at.isoformat() if entry.expires_at else None,
            },
        )
    return entry, new


def remove(address: str) -> Suppression | None:
    """Take an address off the list, committed and audited; the entry it was, if any."""
    address = address.strip()
    if unstorable(address) or len(address) > 998:
        raise Invalid(f"not an address: {UNSTORABLE_ERROR}, at most 998 characters")
    try:
        suppression.key_of(address)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    found = suppression.remove(address)
    db.session.commit()
    if found is not None:
        audit.record("unsuppress", None, {"address": found.address, "reason": found.reason})
    return found


@dataclass(frozen=True)
class Page:
    entries: list[Suppression]
    before: int | None  # the id to ask for the next (older) page with, if there is one


def page(search: str = "", before: int | None = None, limit: int = PAGE) -> Page:
    """Entries newest first, whose address holds search (any case), older than before."""
    if unstorable(search) or (before is not None and before not in ID_RANGE):
        return Page([], None)  # nothing holds it (PostgreSQL would refuse to compare)
    stmt = select(Suppression).order_by(Suppression.id.desc()).limit(limit + 1)
    if search.strip():
        term = search.strip().lower()
        stmt = stmt.where(func.lower(Suppression.address).contains(term, autoescape=True))
    if before is not None:
        stmt = stmt.where(Suppression.id < before)
    rows = list(db.session.scalars(stmt))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, rows[-1].id if more else None)


def entry_json(entry: Suppression, now: datetime | None = None) -> dict[str, Any]:
    """An entry as the API and the CSV export tell it; times in UTC, ISO 8601."""
    now = now or utcnow()
    return {
        "id": entry.id,
        "address": entry.address,
        "key": entry.key,
        "reason": entry.reason,
        "source": entry.source,
        "created_at": iso(entry.created_at),
        "expires_at": iso(entry.expires_at),
        "created_by": entry.created_by,
        "message_pk": entry.message_pk,
        "bounce_pk": entry.bounce_pk,
        "live": entry.expires_at is None or entry.expires_at > now,
    }


def export_rows(chunk: int = 1000) -> Iterator[str]:
    """The whole list as CSV lines (a header first), oldest first, read a chunk at a time."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_FIELDS)
    after = 0
    while True:
        yield out.getvalue()
        out.seek(0), out.truncate()
        stmt = select(Suppression).where(Suppression.id > after).order_by(Suppression.id)
        rows = list(db.session.scalars(stmt.limit(chunk)))
        if not rows:
            return
        for entry in rows:
            shown = entry_json(entry)
            writer.writerow([_cell(shown[name]) for name in CSV_FIELDS])
        after = rows[-1].id
        db.session.expunge_all()


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(FORMULA) else text


def _uncell(value: str | None) -> str:
    text = value or ""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA) else text


@dataclass(frozen=True)
class Imported:
    added: int
    listed: int  # already on the list (live): left as they were


def import_csv(lines: Iterable[str], now: datetime | None = None) -> Imported:
    """Suppress every address of a CSV (columns address, reason, optional expires_at), all
    or none: Invalid naming each bad line by its number if any is bad."""
    now = now or utcnow()
    reader = csv.DictReader(lines)
    if not reader.fieldnames or "address" not in reader.fieldnames:
        raise Invalid("line 1: the header must name an address column (and reason, expires_at)")
    good, errors = [], []
    for row in reader:
        number = reader.line_num
        try:
            address = checked_address(_uncell(row.get("address")))
            reason = checked_reason(_uncell(row.get("reason")) or "imported")
            good.append((address, reason, expiry(at=row.get("expires_at"), now=now)))
        except Invalid as exc:
            errors.append(f"line {number}: {exc}")
    if errors:
        raise Invalid(
            "nothing was imported: "
            + "; ".join(errors[:50])
            + (f"; and {len(errors) - 50} more" if len(errors) > 50 else "")
        )
    added = 0
    try:
        for address, reason, expires_at in good:
            added += suppression.add(address, reason, "import", expires_at=expires_at, now=now)[1]
        db.session.commit()
    except Exception:
        db.session.rollback()
        raise
    audit.record("suppressions_import", None, {"added": added, "listed": len(good) - added})
    return Imported(added, len(good) - added)
