"""The buckets' rows: taking a batch's tokens, slowing a bucket down, made on first use.

Correct under concurrency on every database because every change to a bucket is a
read-modify-write of its row under a lock held to the commit:

- MariaDB and PostgreSQL: SELECT ... FOR UPDATE of the batch's buckets, in name order
  (so two workers wanting the same buckets queue up instead of deadlocking), then the
  arithmetic (outbox.throttle.buckets) in Python and an UPDATE of each row, then COMMIT.
  A second worker's locking read waits for the first's commit and then reads what it
  wrote (READ COMMITTED reads the latest committed row under FOR UPDATE), so no token is
  counted twice.
- SQLite has no row locks: the transaction starts with an UPDATE of the rows (which
  takes the database's write lock, and BEGINs the transaction in pysqlite), so the read
  and the writes after it see and change the rows alone.

A batch costs one transaction however many mails it holds: one locking read of its
buckets (a row per distinct bucket), one UPDATE per bucket, the hand-back of the
messages held back, one COMMIT. A bucket not there yet is made by an INSERT that keeps
a row already there (ON CONFLICT DO NOTHING, ON DUPLICATE KEY UPDATE name = name), in a
transaction of its own before the locking read: two workers making it at once both
succeed, and one row results.
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.dialects import mysql, postgresql, sqlite

from outbox import queue
from outbox.capabilities.throttle.buckets import Bucket, burst_of
from outbox.capabilities.throttle.keys import Needs
from outbox.models import Throttle
from outbox.models.db import db
from outbox.queue.claims import with_retries

THROTTLES = cast(Table, Throttle.__table__)
COLUMNS = ("name", "rate", "tokens", "updated_at", "factor", "slowed_at", "reason", "held_until")


def _dialect() -> str:
    return db.engine.dialect.name


def _locked(names: Iterable[str]) -> dict[str, Bucket]:
    """The buckets of these names that are there, locked to the end of the transaction."""
    names = sorted(set(names))
    c = THROTTLES.c
    where = c.name.in_(names)
    if _dialect() == "sqlite":
        db.session.execute(update(THROTTLES).where(where).values(name=c.name))
        stmt = select(*(c[n] for n in COLUMNS)).where(where)
    else:
        stmt = select(*(c[n] for n in COLUMNS)).where(where).order_by(c.name).with_for_update()
    return {row.name: Bucket(**row._mapping) for row in db.session.execute(stmt)}


def _make(rates: Mapping[str, float], now: datetime) -> None:
    """Make the buckets not there yet, full; a row another worker made first is kept."""
    rows = [dict(name=name, rate=rate, burst=burst_of(rate), tokens=burst_of(rate),
                 updated_at=now, factor=1.0) for name, rate in sorted(rates.items())]  # fmt: skip
    dialect = _dialect()
    if dialect in ("mysql", "mariadb"):
        mine = mysql.insert(THROTTLES)
        stmt: Any = mine.on_duplicate_key_update(name=mine.inserted.name)
    else:
        ours = postgresql.insert(THROTTLES) if dialect == "postgresql" else sqlite.insert(THROTTLES)
        stmt = ours.on_conflict_do_nothing()
    db.session.execute(stmt, rows)
    db.session.commit()


_WRITE = (
    update(THROTTLES)
    .where(THROTTLES.c.name == bindparam("b_name"))
    .values({n: bindparam(f"b_{n}") for n in COLUMNS[1:]} | {"burst": bindparam("b_burst")})
)


def _write(buckets: Iterable[Bucket]) -> None:
    """Write the buckets back to their rows (locked by this transaction)."""
    rows = [{f"b_{n}": getattr(b, n) for n in COLUMNS} | {"b_burst": b.burst} for b in buckets]
    if rows:
        db.session.execute(_WRITE, rows)


def take(
    wants: list[tuple[queue.Claim, Needs]], now: datetime
) -> tuple[list[queue.Claim], list[str]]:
    """Take a token of every bucket each claim needs, in one transaction; hand back the rest.

    Returns the claims that got all theirs (in the order given) and, for each claim held
    back, the bucket it waits for (for the metrics). A claim is let through only if
    every bucket it needs has a token, and only then are they taken: none is taken for
    a claim held back by another bucket. The claims held back go back to waiting in the
    same transaction (queue.hold), each due again when its bucket has a token for it.
    """
    rates: dict[str, float] = {}
    for _, needs in wants:
        rates |= needs.must | needs.own

    def step() -> tuple[list[queue.Claim], list[str]]:
        buckets = _locked(rates)
        missing = {n: rates[n] for _, needs in wants for n in needs.must if n not in buckets}
        if missing:
            db.session.rollback()
            _make(missing, now)
            buckets = _locked(rates)
        for bucket in buckets.values():
            bucket.rate = rates[bucket.name]  # as this worker's settings say now
            bucket.refill(now)
        admitted, waiting = _share(wants, buckets)
        turns = _turns(waiting, buckets, now)
        _write(buckets.values())
        queue.hold(turns)
        db.session.commit()
        return admitted, [names[0] for names in waiting.values()]

    return with_retries(step)  # type: ignore[no-any-return]


def _share(
    wants: list[tuple[queue.Claim, Needs]], buckets: Mapping[str, Bucket]
) -> tuple[list[queue.Claim], dict[queue.Claim, list[str]]]:
    """Let claims through in order while their buckets have tokens; the others, and why."""
    admitted: list[queue.Claim] = []
    waiting: dict[queue.Claim, list[str]] = {}
    for claim, needs in wants:
        names = [*needs.must, *(n for n in needs.own if n in buckets)]
        lacking = [n for n in names if buckets[n].tokens < 1]
        if lacking:
            waiting[claim] = lacking
            continue
        for name in names:
            buckets[name].take()
        admitted.append(claim)
    return admitted, waiting


def _turns(
    waiting: Mapping[queue.Claim, list[str]], buckets: Mapping[str, Bucket], now: datetime
) -> dict[queue.Claim, datetime]:
    """When each claim held back comes back: its turn at the latest of the buckets it lacks.

    Each bucket gives the claims held back for it turns one token apart, after those it
    gave out before (Bucket.turns), so they come back one by one, not all at once.
    """
    by_bucket: dict[str, list[queue.Claim]] = {}
    for claim, lacking in waiting.items():
        for name in lacking:
            by_bucket.setdefault(name, []).append(claim)
    due: dict[queue.Claim, datetime] = {}
    for name, claims in by_bucket.items():
        for claim, at in zip(claims, buckets[name].turns(len(claims), now), strict=True):
            due[claim] = max(due.get(claim, at), at)
    return due


def slow_down(name: str, rate: float, now: datetime, reason: str) -> bool:
    """Halve a bucket's rate for reason (making it if needed); False if it was just slowed."""

    def step() -> bool:
        found = _locked([name]).get(name)
        if found is None:
            db.session.rollback()
            _make({name: rate}, now)
            found = _locked([name])[name]
        found.rate = rate
        found.refill(now)
        slowed = found.slow_down(now, reason)
        if slowed:
            _write([found])
        db.session.commit()
        return slowed

    return with_retries(step)  # type: ignore[no-any-return]


def held_back(now: datetime) -> list[Bucket]:
    """The buckets slowed down or holding messages back now, for the dashboard (one query).

    Only those rows are read: slowed (factor under 1; one that has recovered since is
    left out here) or with messages held back for them still to come back.
    """
    c = THROTTLES.c
    stmt = select(*(c[n] for n in COLUMNS)).where((c.factor < 1) | (c.held_until > now))
    found = [Bucket(**row._mapping) for row in db.session.execute(stmt.order_by(c.name))]
    return [b for b in found if b.slowed(now) or b.holding(now)]
