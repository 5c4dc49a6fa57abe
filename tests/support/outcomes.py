"""One attempt's outcome written through queue.record, as a worker writes a group of them."""

from datetime import datetime

from outbox import queue
from outbox.core.status import Outcome, Retry, Status


def sent(claim: queue.Claim, now: datetime, note: str | None = None) -> bool:
    """The message went out (note lists recipients the server refused, if any)."""
    return claim.id in queue.record([queue.Finished(claim, Outcome.SENT, now, None, note)])


def failed(claim: queue.Claim, now: datetime, code: int | None, error: str) -> bool:
    """The message will never go out."""
    return claim.id in queue.record([queue.Finished(claim, Outcome.FAILED, now, code, error)])


def deferred(
    claim: queue.Claim, now: datetime, code: int | None, error: str, retry: Retry
) -> Status | None:
    """A transient failure; the new status, or None if the claim was no longer held."""
    done = queue.Finished(claim, Outcome.DEFERRED, now, code, error)
    return queue.record([done], retry).get(claim.id)
