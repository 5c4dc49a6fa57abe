"""The only code that writes a message's status: storing, claiming, recording, staff moves.

Every status write is a statement made by moves.guarded, which checks the move against
status.MOVES and names in its WHERE the status (and, for a worker, the claim) it expects.
Callers use the verbs below; the modules behind them are the package's own business.
"""

from outbox.queue.attachments import Damaged, read_attachments, read_inline
from outbox.queue.claims import Claim, claim_batch, has_due, release, release_held, renew
from outbox.queue.holds import hold
from outbox.queue.moves import MoveRefused
from outbox.queue.outcomes import Finished, on_recorded, record, release_stale
from outbox.queue.staff import (
    Moved,
    cancel,
    cancel_many,
    resend,
    resend_all_failed,
    resend_many,
    send_again,
    send_now,
)
from outbox.queue.store import (
    BATCH_KEY_SEPARATOR,
    Queued,
    batch_fingerprint,
    enqueue,
    enqueue_batch,
)

__all__ = [
    "BATCH_KEY_SEPARATOR", "Claim", "Damaged", "Finished", "MoveRefused", "Queued",
    "Moved", "batch_fingerprint", "cancel", "cancel_many", "claim_batch", "enqueue",
    "enqueue_batch", "has_due", "hold", "on_recorded", "read_attachments", "read_inline",
    "record", "release", "release_held", "release_stale", "renew",
    "resend", "resend_all_failed", "resend_many", "send_again", "send_now",
]  # fmt: skip
