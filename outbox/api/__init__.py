"""The HTTP API other web apps use: queue messages, list and read them, resend or cancel one."""

from outbox.api import domains as _domains  # noqa: F401, I001 (routes)
from outbox.api import enqueueing, listing, messages, suppressions, webhooks  # noqa: F401 (routes)
from outbox.api import mailings as _mailings  # noqa: F401, I001 (routes)
from outbox.api.blueprint import bp

__all__ = ["bp"]
