"""What happened to messages and recipients, told to the apps through their webhooks.

The webhooks work owns this module; the kinds and emit()'s signature are the contract
the bounce and suppression code call.
"""

from datetime import datetime

SENT = "message.sent"
DEFERRED = "message.deferred"
FAILED = "message.failed"
BOUNCED = "recipient.bounced"
SUPPRESSED = "recipient.suppressed"
KINDS = (SENT, DEFERRED, FAILED, BOUNCED, SUPPRESSED)


def emit(
    kind: str,
    *,
    message_pk: int,
    message_id: str,
    recipient: str | None = None,
    code: str | None = None,
    text: str | None = None,
    at: datetime | None = None,
) -> None:
    """Queue one event for every enabled endpoint that takes its kind, in the caller's
    transaction (the caller commits). Placeholder until the webhooks work lands."""
