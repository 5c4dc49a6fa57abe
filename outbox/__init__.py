"""outbox: a database-backed mail outbox for web applications."""

from .app import create_app

__all__ = ["create_app"]
