"""The suppression list: which addresses are never sent to, matched by key, added and removed.

An entry's key is the address's local part exactly as given and its domain as lower-case
IDNA2008 A-labels, so Ann@Bücher.example and Ann@xn--bcher-kva.example are one entry and
ann@bücher.example another (a local part's case may matter to its server, RFC 5321 2.4).
An entry past its expires_at suppresses nothing. add() and remove() write in the
caller's transaction; the caller commits (and writes the audit trail, for a person).
"""

import math
import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from flask import current_app
from sqlalchemy import Executable, Row, bindparam, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from outbox.auth.audit import actor
from outbox.core.addresses import a_label
from outbox.core.streams import Stream
from outbox.models import Suppression, Timestamp, utcnow
from outbox.models.db import AUTOCOMMIT, db

SOURCES = ("bounce", "complaint", "smtp", "manual", "import", "unsubscribe")
# Sources whose entries keep broadcast mail only from an address: a person who left a
# newsletter still gets the password reset they ask for. Bounces, complaints (a mailbox
# provider counts a complaint against the sender whatever the mail was), the mail
# servers' refusals and staff's own entries keep every stream's mail away.
BROADCAST_ONLY = frozenset({"unsubscribe"})
REASON_CHARS = 1000  # a reason is cut to this many characters
MODES = ("mark", "reject")  # OUTBOX_SUPPRESSED: record suppressed recipients, or refuse them
TABLE = Suppression.__table__
# Keys per IN list: one query for any batch the API takes (1,000 messages of a few
# recipients), within every database's limit of parameters.
KEYS_PER_QUERY = 10_000
# How long a process trusts that the list holds no live entry. While it holds none (an
# install before its first bounce) enqueue asks the database nothing; an address added
# by another process is matched by this one within this time, and at once by itself.
EMPTY_SECONDS = 1.0


def key_of(address: str) -> str:
    """The key an address is matched by: the local part exact, the domain as lower-case A-labels."""
    local, at, domain = address.strip().strip("<>").rpartition("@")
    if not at or not local or not domain:
        raise ValueError(f"{address!r} is not an email address")
    try:
        domain = a_label(domain.rstrip("."))
    except ValueError:
        pass  # not a domain IDNA2008 takes: then it only ever matches itself
    return f"{local}@{domain.lower()}"


def _live(now: Any) -> Any:
    return or_(TABLE.c.expires_at.is_(None), TABLE.c.expires_at > now)


# Made once, with the keys and the time as parameters: building a statement afresh cost
# more CPU than running it (bench/README's enqueue section).
_NOW = bindparam("now", type_=Timestamp)
# What a match is told by (describe) and its evidence, not the rest: PyMySQL reads the
# description of every column of every result anew, about 20 us of CPU each.
_MATCHING = select(TABLE.c.key, TABLE.c.id, TABLE.c.source, TABLE.c.reason, TABLE.c.message_pk,
                   TABLE.c.bounce_pk).where(
    TABLE.c.key.in_(bindparam("keys", expanding=True)), _live(_NOW))  # fmt: skip
_ANY_LIVE = select(TABLE.c.id).where(_live(_NOW)).limit(1)


def _read(stmt: Executable, values: dict[str, Any]) -> list[Row[Any]]:
    """Rows of committed entries: on a database server through the autocommit engine, so a
    request that only enqueues makes no session and no transaction for them."""
    if AUTOCOMMIT not in db.engines:
        return list(db.session.execute(stmt, values))
    with db.engines[AUTOCOMMIT].connect() as conn:
        return list(conn.execute(stmt, values))


def _known_empty(now: datetime) -> bool:
    """Whether the list held no live entry when this process last looked (EMPTY_SECONDS)."""
    # Never looked: -inf, not 0.0, since monotonic() counts from boot and may be small.
    seen = current_app.extensions.setdefault("suppression_empty", [-math.inf, False])
    if time.monotonic() - seen[0] > EMPTY_SECONDS:
        seen[:] = [time.monotonic(), not _read(_ANY_LIVE, {"now": now})]
    return bool(seen[1])


def _not_empty() -> None:
    current_app.extensions["suppression_empty"] = [time.monotonic(), False]


def matching(
    addresses: Iterable[str], now: datetime | None = None, *, hot: bool = False
) -> dict[str, Row[Any]]:
    """The live entries of these addresses, by key: one query for a whole batch.

    hot (enqueue): none while this process found the list empty within EMPTY_SECONDS.
    """
    now = now or utcnow()
    keys = sorted({key_of(address) for address in addresses})
    found: dict[str, Row[Any]] = {}
    if not keys or (hot and _known_empty(now)):
        return found
    for start in range(0, len(keys), KEYS_PER_QUERY):
        part = keys[start : start + KEYS_PER_QUERY]
        found.update((row.key, row) for row in _read(_MATCHING, {"keys": part, "now": now}))
    return found


def suppresses(entry: Row[Any] | Suppression, stream: str) -> bool:
    """Whether a live entry keeps mail of this stream (core.streams) from its address."""
    return stream == Stream.BROADCAST.value or entry.source not in BROADCAST_ONLY


def keeping(
    addresses: Iterable[str], stream: str, now: datetime | None = None
) -> dict[str, Suppression]:
    """The live entries that keep mail of this stream from these addresses, by the address
    as given, in the order given: what the compose page warns of before it queues a message."""
    keys = {address: key_of(address) for address in addresses}
    if not keys:
        return {}
    live = _live(now or utcnow())
    stmt = select(Suppression).where(Suppression.key.in_(sorted(set(keys.values()))), live)
    entries = {entry.key: entry for entry in db.session.scalars(stmt) if suppresses(entry, stream)}
    return {address: entries[key] for address, key in keys.items() if key in entries}


def find(address: str) -> Suppression | None:
    """The entry of an address, live or expired."""
    return db.session.execute(
        select(Suppression).where(Suppression.key == key_of(address))
    ).scalar_one_or_none()


def _creator(source: str) -> str:
    """Who made an entry: outbox itself for what the mail servers said, else the actor."""
    if source in ("bounce", "complaint", "smtp", "unsubscribe"):
        return f"outbox ({source})"
    return actor()[0][:255]


def add(
    address: str,
    reason: str,
    source: str,
    *,
    message_pk: int | None = None,
    bounce_pk: int | None = None,
    expires_at: datetime | None = None,
    now: datetime | None = None,
) -> tuple[Suppression, bool]:
    """Suppress an address, in the caller's transaction; the entry and whether it is new.

    Idempotent: a live entry of the address stays as it is, with its first reason and
    evidence; an expired one is made anew. ValueError for a bad address or source.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    now = now or utcnow()
    if expires_at is not None and expires_at <= now:
        raise ValueError("expires_at must be in the future")
    key = key_of(address)
    if len(key) > 320 or len(address) > 998:
        raise ValueError(f"{address[:60]!r}... is too long for an email address")
    values = {
        "address": address.strip().strip("<>"),
        "key": key,
        "reason": reason.strip()[:REASON_CHARS],
        "source": source,
        "created_at": now,
        "expires_at": expires_at,
        "created_by": _creator(source),
        "message_pk": message_pk,
        "bounce_pk": bounce_pk,
    }
    _not_empty()
    for _ in range(2):  # a second time if another request made the same entry meanwhile
        found = find(address)
        if found is not None and (found.expires_at is None or found.expires_at > now):
            return found, False
        try:
            with db.session.begin_nested():
                if found is not None:  # expired: the entry is made anew
                    stmt = update(Suppression).where(Suppression.id == found.id)
                    db.session.execute(stmt.values(**values))
                    db.session.refresh(found)
                    return found, True
                entry = Suppression(**values)
                db.session.add(entry)
            return entry, True
        except IntegrityError:
            continue
    raise RuntimeError(f"could not add {address!r} to the suppression list")


def remove(address: str) -> Suppression | None:
    """Take an address off the list, in the caller's transaction; the entry removed, if any."""
    found = find(address)
    if found is not None:
        db.session.execute(delete(Suppression).where(Suppression.id == found.id))
    return found


def purge_old(cutoff: datetime) -> int:
    """Remove entries that expired before cutoff; commit. Entries for good are never purged."""
    stmt = delete(Suppression).where(Suppression.expires_at < cutoff)
    count: int = db.session.execute(stmt).rowcount  # type: ignore[attr-defined]
    db.session.commit()
    return count


# An enhanced status code (RFC 3463) where a reply's text starts, or as the first word
# that looks like one.
ENHANCED = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])")
# Enhanced codes that say the mailbox is not there (for good): bad mailbox (5.1.1),
# bad system (5.1.2), bad address syntax (5.1.3), moved with no forwarding address
# (5.1.6), null MX (5.1.10), disabled (5.2.1). Not 5.2.2 (full), 5.3.x and 5.6.x
# (the system or the content), nor 5.7.x (policy: spam, SPF, relaying).
NO_SUCH_USER = frozenset({(1, 1), (1, 2), (1, 3), (1, 6), (1, 10), (2, 1)})
# The words of a 550 without an enhanced code that says the same.
UNKNOWN_USER = re.compile(
    r"user unknown|unknown user|no such (user|mailbox|recipient|account)"
    r"|unknown (recipient|mailbox|local part)|(mailbox|recipient|user|account|address)"
    r" (does not|doesn't|did not) exist|invalid (recipient|mailbox)|mailbox not found",
    re.IGNORECASE,
)


def no_such_user(code: int | None, text: str) -> bool:
    """Whether a refusal says the recipient's mailbox does not exist (suppress it).

    By the enhanced status code in the text if there is one; only without one, by a 550
    whose words say so. A refusal for now (4xx) never is.
    """
    if code is not None and not 500 <= code < 600:
        return False
    found = ENHANCED.search(text or "")
    if found is not None:
        klass, subject, detail = (int(part) for part in found.groups())
        return klass == 5 and (subject, detail) in NO_SUCH_USER
    return code == 550 and UNKNOWN_USER.search(text or "") is not None


def describe(entry: Row[Any] | Suppression | Mapping[str, Any]) -> str:
    """An entry in a few words, as an error or a recipient's reply names it."""
    get = entry.get if isinstance(entry, Mapping) else lambda name: getattr(entry, name)
    return f"on the suppression list ({get('source')}): {get('reason')}"
