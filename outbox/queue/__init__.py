"""The only code that writes a message's status: storing, claiming, recording, staff moves.

Every status write is a statement made by moves.guarded, which checks the move against
status.MOVES and names in its WHERE the status (and, for a worker, the claim) it expects.
Callers use the verbs below; the modules behind them are the package's own business.
The layers above react through the hooks they register at start (queue.hooks), and say
how their kinds of message are built and copied (queue.kinds): the queue imports none.
"""

from outbox.queue.attachments import Damaged, read_attachments, read_inline
from outbox.queue.claims import Claim, claim_batch, has_due, release, release_held, renew
from outbox.queue.holds import hold
from outbox.queue.hooks import (
    Written,
    on_lost,
    on_outcomes,
    on_recorded,
    on_requeue,
    on_store,
)
from outbox.queue.inserts import insert_groups, insert_row, insert_rows
from outbox.queue.kinds import build, on_kind
from outbox.queue.moves import MoveRefused, write_recipients
from outbox.queue.outcomes import Finished, record, release_stale
from outbox.queue.staff import (
    Moved,
    cancel,
    cancel_many,
    copy_plain,
    draft_of,
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
from outbox.queue.waiting import (
    PAUSED_UNTIL,
    cancel_mailing,
    pause_mailing,
    paused_rows,
    resume_mailing,
)

__all__ = [
    "BATCH_KEY_SEPARATOR", "PAUSED_UNTIL", "Claim", "Damaged", "Finished", "MoveRefused", "Moved",
    "Queued", "Written", "batch_fingerprint", "build", "cancel", "cancel_mailing", "cancel_many",
    "claim_batch", "copy_plain", "draft_of", "enqueue", "enqueue_batch", "has_due", "hold",
    "insert_groups", "insert_row", "insert_rows", "on_kind", "on_lost", "on_outcomes",
    "on_recorded", "on_requeue", "on_store", "pause_mailing", "paused_rows", "read_attachments",
    "read_inline", "record", "release", "release_held", "release_stale", "renew", "resend",
    "resend_all_failed", "resend_many", "resume_mailing", "send_again", "send_now",
    "write_recipients",
]  # fmt: skip
