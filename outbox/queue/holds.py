"""Holding claimed messages back for a rate limit: waiting again until a given time, no attempt."""

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import case

from outbox.core.status import Status
from outbox.queue.claims import Claim
from outbox.queue.moves import MESSAGES, changed, guarded


def hold(claims: Mapping[Claim, datetime]) -> int:
    """Hand claims back to waiting, each due again at its own time; how many moved.

    As if never claimed (queue.release), but due later: the status goes back to queued
    (never tried) or deferred, attempts stay as they were and no Attempt is written, so
    a message held back for a rate limit spends none of its allowance. Guarded by the
    claim. Runs in the caller's transaction (outbox.throttle takes the tokens in the same
    one); the caller commits.
    """
    if not claims:
        return 0
    c = MESSAGES.c
    worker_id = next(iter(claims)).worker_id
    never_tried = case((c.attempts == 0, Status.QUEUED.value), else_=Status.DEFERRED.value)
    due = case({claim.id: at for claim, at in claims.items()}, value=c.id)
    stmt = guarded(Status.SENDING, (Status.QUEUED, Status.DEFERRED),
                   c.id.in_([claim.id for claim in claims]), c.locked_by == worker_id,
                   status=never_tried, locked_by=None, locked_at=None,
                   next_attempt_at=due)  # fmt: skip
    return changed(stmt)
