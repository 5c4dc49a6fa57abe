"""outbox's Python client: hand mail to outbox over its HTTP API, from any Python app.

Only the standard library is needed: this package imports neither Flask nor SQLAlchemy
nor a database driver (outbox.client.django and outbox.client.flask import their
framework, and only they do).
"""

from outbox.client.api import BATCH_LIMIT, Client, new_key
from outbox.client.email import Attachment, Email
from outbox.client.errors import (
    AuthError,
    Conflict,
    FieldError,
    FieldErrors,
    Forbidden,
    NotFound,
    OutboxError,
    TooLarge,
    Unavailable,
)
from outbox.client.results import (
    AttachmentInfo,
    AttemptInfo,
    Message,
    MessageDetail,
    Page,
    Queued,
    Recipient,
)

__all__ = [
    "BATCH_LIMIT", "Attachment", "AttachmentInfo", "AttemptInfo", "AuthError", "Client",
    "Conflict", "Email", "FieldError", "FieldErrors", "Forbidden", "Message", "MessageDetail",
    "NotFound", "OutboxError", "Page", "Queued", "Recipient", "TooLarge", "Unavailable",
    "new_key",
]  # fmt: skip
