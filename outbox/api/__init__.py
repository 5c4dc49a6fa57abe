"""The HTTP API other web apps use: queue messages, list and read them, resend or cancel one."""

from . import enqueueing, listing, messages, suppressions  # noqa: F401 (each adds its routes to bp)
from .blueprint import bp

__all__ = ["bp"]
