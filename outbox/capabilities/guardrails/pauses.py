"""Domain pauses: the sending domains whose broadcast mail no worker claims, tripping one when
a rate is over its threshold, resuming it, and the workers' cached look at which are paused.

A trip writes the row and its domain.paused event in one transaction guarded by the
row's paused_at being empty, so of several workers that find the same rate over,
one pauses and tells. A resume sets counts_from to the next hour: only outcomes from
then on can pause the domain again, so the window that tripped it does not at once.
"""

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from outbox.capabilities.guardrails import hours
from outbox.capabilities.guardrails.rates import (
    Rate,
    Thresholds,
    first_hour,
    hour_of,
    judged,
    tripped,
    windowed,
)
from outbox.capabilities.webhooks import events
from outbox.core.addresses import a_label
from outbox.models import DomainPause, utcnow
from outbox.models.db import db
from outbox.queue import wakeups

log = logging.getLogger(__name__)

# A process asks which domains are paused at most this often (seconds): a pause or a
# resume made in another process reaches its claims within this long; in this one, at once.
HELD_FOR = 2.0
KEY = __name__  # the process's cached answer, in app.extensions


@dataclass
class Held:
    """A process's last answer to which domains are paused, and until when it holds."""

    domains: frozenset[str] = frozenset()
    until: float = 0.0  # time.monotonic() past which the answer is asked again


def held() -> frozenset[str]:
    """The paused domains, each as its From addresses may spell it (A-labels and U-labels):
    one read of a small table every HELD_FOR seconds, none between."""
    cached = current_app.extensions.setdefault(KEY, Held())
    if time.monotonic() < cached.until:
        return cached.domains
    stmt = select(DomainPause.domain).where(DomainPause.paused_at.is_not(None))
    domains = frozenset(db.session.scalars(stmt))
    db.session.commit()
    cached.domains = frozenset(form for domain in domains for form in _spellings(domain))
    cached.until = time.monotonic() + HELD_FOR
    return cached.domains


def _spellings(domain: str) -> set[str]:
    """A domain as A-labels and as U-labels."""
    found = {domain}
    try:
        found.add(domain.encode("ascii").decode("idna"))
    except UnicodeError:
        pass
    return found


def forget() -> None:
    """Ask again at the next claim: a pause or a resume was made in this process."""
    current_app.extensions.setdefault(KEY, Held()).until = 0.0


def listed() -> list[DomainPause]:
    """Every domain that was ever paused, the paused ones first."""
    stmt = select(DomainPause).order_by(DomainPause.paused_at.is_(None), DomainPause.domain)
    found = list(db.session.scalars(stmt))
    db.session.commit()
    return found


def rates(now: datetime | None = None) -> list[Rate]:
    """Every rate of the counted hours, each over the outcomes that count toward a trip."""
    return _rates(now or utcnow(), _floors())


def _floors() -> dict[str, datetime]:
    """Each resumed domain's counts_from: its hours before it count no more."""
    return {p.domain: p.counts_from for p in listed() if p.counts_from is not None}


def _rates(now: datetime, floors: dict[str, datetime]) -> list[Rate]:
    hours.flush()  # this process's own counts first
    counted = hours.since(first_hour(now))
    return judged(windowed(counted, now, floors), Thresholds.from_config(current_app.config))


def check(now: datetime | None = None) -> list[Rate]:
    """Pause every domain with a rate over its threshold that is not paused yet; the rates
    of the pauses this call made."""
    now = now or utcnow()
    floors = _floors()
    found = tripped(_rates(now, floors)).values()
    return [rate for rate in found if trip(rate, now, floors.get(rate.domain))]


def trip(rate: Rate, now: datetime, counted_from: datetime | None = None) -> bool:
    """Pause rate's domain with rate as the reason, and emit domain.paused; False if it was
    paused already, or resumed since: counted_from is the domain's counts_from that rate was
    read with, and a resume made meanwhile moved it (the rate counted outcomes that no longer
    count, and pausing on it would undo the resume at once)."""
    noted = dict(paused_at=now, stream=rate.stream, kind=rate.kind, span=rate.window,
                 rate=rate.percent, threshold=rate.threshold, recipients=rate.recipients,
                 reason=rate.reason())  # fmt: skip
    c = DomainPause.__table__.c
    same_floor = c.counts_from.is_(None) if counted_from is None else c.counts_from == counted_from
    try:
        moved = db.session.execute(
            update(DomainPause)
            .where(c.domain == rate.domain, c.paused_at.is_(None), same_floor)
            .values(noted)
        ).rowcount  # type: ignore[attr-defined]
        if not moved:
            if db.session.get(DomainPause, rate.domain) is not None:
                db.session.rollback()
                return False
            db.session.execute(insert(DomainPause).values(domain=rate.domain, **noted))
        metadata = {"domain": rate.domain, "stream": rate.stream, "kind": rate.kind,
                    "window": rate.window, "rate": f"{rate.percent or 0:.4f}",
                    "threshold": f"{rate.threshold:g}",
                    "recipients": str(rate.recipients)}  # fmt: skip
        events.emit_many([events.Event(events.DOMAIN_PAUSED, None, None, text=rate.reason(),
                                       at=now, metadata=metadata)])  # fmt: skip
        db.session.commit()
    except IntegrityError:  # another process inserted it first: that one tells
        db.session.rollback()
        return False
    forget()  # this process's claims hold the domain from now on
    return True


def resume(domain: str, resumed_by: str, now: datetime | None = None) -> DomainPause | None:
    """Resume a domain's broadcast mail, waking idle workers; the pause lifted, or None if the
    domain was not paused. The caller writes the audit trail."""
    now = now or utcnow()
    domain = normal(domain)
    c = DomainPause.__table__.c
    values = dict(paused_at=None, resumed_at=now, resumed_by=resumed_by[:255],
                  counts_from=hour_of(now) + timedelta(hours=1))  # fmt: skip
    found = db.session.get(DomainPause, domain)
    if found is None or found.paused_at is None:
        db.session.rollback()
        return None
    lifted = db.session.execute(
        update(DomainPause).where(c.domain == domain, c.paused_at.is_not(None)).values(values)
    ).rowcount  # type: ignore[attr-defined]
    if lifted:
        wakeups.wake()
    db.session.commit()
    forget()
    return db.session.get(DomainPause, domain) if lifted else None


def normal(domain: str) -> str:
    """A domain as the pauses key it: A-labels, lower case, no dots around it."""
    domain = domain.strip().strip(".")
    try:
        return a_label(domain).lower()
    except ValueError:
        return domain.lower()


def check_if_due(worker_id: str) -> None:
    """The workers' periodic look (beside the pages' counts): a failure is logged, not raised."""
    try:
        for rate in check():
            log.warning("%s: broadcast mail from %s paused: %s", worker_id, rate.domain,
                        rate.reason())  # fmt: skip
    except Exception:
        db.session.rollback()
        log.exception("%s: checking the guardrails failed", worker_id)


def flush_safely(worker_id: str) -> None:
    """Write this process's counts as a worker stops: a failure is logged, not raised."""
    try:
        hours.flush()
    except Exception:
        log.exception("%s: writing the guardrails' counts failed", worker_id)
