"""The audit trail: who changed what, when and from where; written by `record`, read by `page`."""

import getpass
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import g, has_request_context, request
from flask_login import current_user
from sqlalchemy import delete, func, select

from outbox.models import AuditEvent, utcnow
from outbox.models.db import db

PAGE = 50  # events on one page of the admin's list
BATCH = 500  # events removed per transaction by the purge


def actor() -> tuple[str, str | None]:
    """Who is acting, and from which address: a token, a signed-in person, or the CLI."""
    if not has_request_context():
        try:
            who = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a bare container)
            who = "unknown"
        return f"cli:{who}", None
    if (name := g.get("token_name")) is not None:
        return f"token:{name}", request.remote_addr
    if current_user and current_user.is_authenticated:
        return current_user.email, request.remote_addr
    return "anonymous", request.remote_addr


def record(action: str, message_pk: int | None = None, detail: Any = None) -> None:
    """Write one event of the trail, in its own short transaction."""
    add(action, message_pk, detail)
    db.session.commit()


def add(action: str, message_pk: int | None = None, detail: Any = None) -> None:
    """Add one event of the trail to the caller's transaction (the caller commits).

    The actor and address are found here, from the request or the process. Detail is
    kept as text: a str as it is, anything else as JSON.
    """
    who, remote_addr = actor()
    text = detail if detail is None or isinstance(detail, str) else json.dumps(detail)
    db.session.add(AuditEvent(at=utcnow(), actor=who[:255], action=action, message_pk=message_pk,
                              remote_addr=remote_addr, detail=text))  # fmt: skip


@dataclass
class Filters:
    """What the admin's list narrows to; empty means everything."""

    actor: str | None = None
    action: str | None = None
    message_pk: int | None = None


def page(
    filters: Filters, before: int | None = None, limit: int = PAGE
) -> tuple[list[AuditEvent], int | None]:
    """Events newest first, older than `before` if given, and the `before` of the next page."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit + 1)
    if filters.actor:
        query = query.where(AuditEvent.actor == filters.actor)
    if filters.action:
        query = query.where(AuditEvent.action == filters.action)
    if filters.message_pk is not None:
        query = query.where(AuditEvent.message_pk == filters.message_pk)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    events = list(db.session.execute(query).scalars())
    more = len(events) > limit
    events = events[:limit]
    return events, (events[-1].id if more else None)


def of_message(message_pk: int, limit: int = PAGE) -> list[AuditEvent]:
    """The newest events naming one message, for its page."""
    return page(Filters(message_pk=message_pk), limit=limit)[0]


def purge_old(cutoff: datetime, dry_run: bool = False) -> int:
    """Remove the events older than cutoff, BATCH at a time; how many went (or would).

    Ids grow with time, so each batch is the front of the primary key: no index on `at`
    is needed, and each delete is by primary keys, in its own short transaction.
    """
    old = select(AuditEvent.id).where(AuditEvent.at < cutoff)
    if dry_run:
        return int(db.session.scalar(select(func.count()).select_from(old.subquery())) or 0)
    removed = 0
    while ids := list(db.session.scalars(old.order_by(AuditEvent.id).limit(BATCH))):
        db.session.execute(delete(AuditEvent).where(AuditEvent.id.in_(ids)))
        db.session.commit()
        removed += len(ids)
    db.session.commit()
    return removed
