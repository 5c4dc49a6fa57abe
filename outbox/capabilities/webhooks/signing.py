"""Signing per the Standard Webhooks specification, with its reference library."""

import base64
import math
import secrets
from datetime import UTC, datetime

from standardwebhooks import Webhook

PREFIX = "whsec_"
SECRET_BYTES = 32  # the specification asks for 24 to 64 random bytes


def new_secret() -> str:
    """A fresh signing secret: "whsec_" and its bytes in base64."""
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def headers(secret: str, event_id: str, body: str, now: datetime | None = None) -> dict[str, str]:
    """The webhook-id, webhook-timestamp and webhook-signature of one request.

    Signed anew at every attempt: receivers refuse a timestamp older than a few minutes,
    and a retry may come hours after the event.
    """
    moment = now or datetime.now(UTC)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(math.floor(moment.replace(tzinfo=UTC).timestamp())),
        "webhook-signature": Webhook(secret).sign(event_id, moment, body),
    }
