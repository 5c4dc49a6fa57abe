"""What staff (and the API) do to one message, to chosen ones or to all failed ones."""

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_

from outbox.core.addresses import Kind
from outbox.core.drafts import Draft
from outbox.core.status import Status, sources
from outbox.core.streams import Stream
from outbox.models import Message, utcnow
from outbox.models.db import db
from outbox.queue import hooks, kinds, wakeups
from outbox.queue.attachments import read_attachments
from outbox.queue.moves import MESSAGES, MoveRefused, changed, due_again, guarded, move_one
from outbox.queue.store import enqueue
from outbox.queue.waiting import PAUSED_UNTIL


def cancel(message_id: int) -> None:
    """Cancel a queued or deferred message; MoveRefused otherwise."""
    if not move_one(message_id, sources(Status.CANCELLED), Status.CANCELLED):
        raise MoveRefused(f"message {message_id} is not queued or deferred")


def resend(message_id: int, allowance: int, now: datetime | None = None) -> None:
    """Queue a failed or cancelled message again, keeping its attempt history.

    It gets a fresh allowance of attempts on top of those already made, and is due now,
    or at its send_after if that is still ahead.
    """
    again = {"next_attempt_at": due_again(now or utcnow()),
             "max_attempts": MESSAGES.c.attempts + allowance}  # fmt: skip
    if hooks.requeue([message_id]):
        db.session.commit()
        raise MoveRefused(f"every recipient of message {message_id} is on the suppression list")
    stmt = guarded((Status.FAILED, Status.CANCELLED), Status.QUEUED,
                   MESSAGES.c.id == message_id, **again)  # fmt: skip
    moved = _woken(changed(stmt))
    db.session.commit()
    if not moved:
        raise MoveRefused(f"message {message_id} is not failed or cancelled")


def send_now(message_id: int, now: datetime | None = None) -> None:
    """Make a deferred or scheduled message due at once instead of at its next attempt time.

    A row its mailing's pause holds stays held: resuming the mailing lets it go.
    """
    c, now = MESSAGES.c, now or utcnow()
    scheduled = and_(c.status == Status.QUEUED.value, c.next_attempt_at > now)
    stmt = guarded((Status.DEFERRED, Status.QUEUED), None, c.id == message_id,
                   or_(c.status == Status.DEFERRED.value, scheduled),
                   c.next_attempt_at != PAUSED_UNTIL, next_attempt_at=now)  # fmt: skip
    moved = _woken(changed(stmt))
    db.session.commit()
    if not moved:
        raise MoveRefused(
            f"message {message_id} is not deferred or scheduled, or its mailing is paused"
        )


def resend_all_failed(allowance: int, now: datetime | None = None) -> int:
    """Queue every failed message again but those with no one left to send to; how many."""
    nobody = hooks.requeue(None)
    stmt = guarded(Status.FAILED, Status.QUEUED, MESSAGES.c.id.not_in(nobody),
                   next_attempt_at=due_again(now or utcnow()),
                   max_attempts=MESSAGES.c.attempts + allowance)  # fmt: skip
    count = _woken(changed(stmt))
    db.session.commit()
    return count


def send_again(message_id: int, source: str, max_attempts: int) -> Message:
    """A new queued message with the content and attachments of a sent one, copied as its
    kind copies (queue.kinds)."""
    old = db.session.get(Message, message_id)
    if old is None or old.status != Status.SENT.value:
        raise MoveRefused(f"message {message_id} is not sent")
    if old.bodies_dropped_at is not None:  # retention dropped what would be sent
        raise MoveRefused(f"message {message_id} has no bodies any more (retention)")
    return kinds.handling(old).send_again(old, source, max_attempts)


def draft_of(old: Message) -> Draft:
    """A stored message as the draft it was queued from: its columns and attachments."""
    return Draft(
        from_addr=old.sender,
        to=old.recipients_of(Kind.TO),
        cc=old.recipients_of(Kind.CC),
        bcc=old.recipients_of(Kind.BCC),
        reply_to=old.reply_to_mailbox,
        subject=old.subject,
        text=old.text_body,
        html=old.html_body,
        headers=dict(old.headers or {}),
        priority=old.priority,
        stream=Stream(old.stream),
        attachments=read_attachments(old.id),
        metadata=dict(old.meta or {}),
    )


def copy_plain(old: Message, source: str, max_attempts: int) -> Message:
    """Send again for a message written from its columns: the same draft, queued anew."""
    return enqueue(draft_of(old), source=source, max_attempts=max_attempts, resent_from=old.id)[0]


@dataclass(frozen=True)
class Moved:
    """What a move of chosen messages did: how many moved, how many were not in a status for it."""

    done: int
    skipped: int


# A caller's bookkeeping written in the move's own transaction (a bulk job's progress), so
# that the rows moved and the record of them commit together or not at all.
Then = Callable[[Moved], None]


def cancel_many(message_ids: Collection[int], then: Then | None = None) -> Moved:
    """Cancel those of the chosen messages that are queued or deferred; commit."""
    ids = set(message_ids)
    stmt = guarded(sources(Status.CANCELLED), Status.CANCELLED, MESSAGES.c.id.in_(ids))
    done = changed(stmt)
    moved = Moved(done, len(ids) - done)
    if then is not None:
        then(moved)
    db.session.commit()
    return moved


def _woken(moved: int) -> int:
    """Wake idle workers if any message was moved (queue.wakeups.wake); how many moved."""
    if moved:
        wakeups.wake()
    return moved


def resend_many(message_ids: Collection[int], allowance: int, now: datetime | None = None,
                then: Then | None = None) -> Moved:  # fmt: skip
    """Queue those of the chosen messages that are failed or cancelled again; commit."""
    ids = set(message_ids)
    nobody = hooks.requeue(ids)
    stmt = guarded((Status.FAILED, Status.CANCELLED), Status.QUEUED,
                   MESSAGES.c.id.in_(ids - nobody), next_attempt_at=now or utcnow(),
                   max_attempts=MESSAGES.c.attempts + allowance)  # fmt: skip
    done = changed(stmt)
    moved = Moved(done, len(ids) - done)
    if then is not None:
        then(moved)
    _woken(done)  # last before the commit (wakeups.wake)
    db.session.commit()
    return moved
