"""The webhook delivery state machine: a delivery's statuses and the moves between them."""

from enum import StrEnum


class WebhookStatus(StrEnum):
    PENDING = "pending"  # due at its next_attempt_at (new, or to be retried)
    SENDING = "sending"  # claimed by a worker, its request under way
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # its last retry failed too; its endpoint was disabled


# A delivery is stored pending; every move after that is one of these, and
# outbox.capabilities.webhooks.store.guarded checks each one against this table.
MOVES: dict[WebhookStatus, frozenset[WebhookStatus]] = {
    WebhookStatus.PENDING: frozenset({WebhookStatus.SENDING}),
    WebhookStatus.SENDING: frozenset(
        {WebhookStatus.PENDING, WebhookStatus.DELIVERED, WebhookStatus.FAILED}
    ),
    WebhookStatus.DELIVERED: frozenset({WebhookStatus.PENDING}),  # sent again by staff
    WebhookStatus.FAILED: frozenset({WebhookStatus.PENDING}),  # sent again by staff
}
# Deliveries nothing more happens to unless staff send them again; the purge takes them.
SETTLED = (WebhookStatus.DELIVERED, WebhookStatus.FAILED)


def can_move(old: WebhookStatus, new: WebhookStatus) -> bool:
    """Whether a delivery may go from old to new."""
    return new in MOVES[old]


def sources(new: WebhookStatus) -> tuple[WebhookStatus, ...]:
    """The statuses from which a delivery may move to new."""
    return tuple(old for old, targets in MOVES.items() if new in targets)
