"""Pausing sending: the one row that stops every worker claiming, and who put it there, when, why.

The row is there while sending is paused (id 1, so two pauses at once cannot both
land) and gone once resumed. Workers read it by primary key before each claim of a
batch, so a pause reaches every worker on every host within one poll interval, even one
in the middle of a long drain; a batch already claimed is sent and recorded. Enqueueing
is not affected.
"""

import getpass
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from outbox.models import Pause, utcnow
from outbox.models.db import db
from outbox.queue import wakeups

ROW = 1  # the pause's one row
REASON_CHARS = 500  # a reason is cut to this many characters


def current() -> Pause | None:
    """The pause in force, or None while sending runs: a fresh read, not the session's copy,
    and detached from the session, so that a commit after it (a page's further reads) does
    not expire it and a resume meanwhile cannot make showing it fail."""
    stmt = select(Pause).where(Pause.id == ROW).execution_options(populate_existing=True)
    found = db.session.execute(stmt).scalar_one_or_none()
    if found is not None:
        db.session.expunge(found)
    return found


def is_paused() -> bool:
    """Whether sending is paused: the workers' one primary-key read before each claim."""
    paused = db.session.execute(select(Pause.id).where(Pause.id == ROW)).first() is not None
    db.session.commit()  # no transaction is kept open on the worker's behalf
    return paused


def pause(
    paused_by: str, reason: str | None = None, now: datetime | None = None
) -> tuple[Pause, bool]:
    """Pause sending; the pause in force and whether this call made it (False: already paused).

    An earlier pause is kept as it is: who paused first, when and why stay on the page.
    """
    reason = (reason or "").strip()[:REASON_CHARS] or None
    row = dict(id=ROW, paused_at=now or utcnow(), paused_by=paused_by[:255], reason=reason)
    try:
        db.session.execute(insert(Pause).values(row))
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        found = current()
        if found is not None:
            return found, False
        return pause(paused_by, reason, now)  # resumed between the two: try again
    found = current()
    assert found is not None
    return found, True


def resume() -> Pause | None:
    """Resume sending, waking idle workers; the pause that was lifted, or None if sending was
    not paused."""
    found = current()
    if found is None:
        return None
    lifted = db.session.execute(delete(Pause).where(Pause.id == ROW)).rowcount  # type: ignore[attr-defined]
    if lifted:
        wakeups.wake()
    db.session.commit()
    return found if lifted else None


def cli_actor() -> str:
    """Who a pause from the shell names: "cli" and the OS user."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a bare container)
        user = "unknown"
    return f"cli ({user})"
