"""outbox: a database-backed mail outbox for web applications."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outbox.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    """create_app, imported when first asked for.

    outbox.client is imported by apps that have neither Flask nor SQLAlchemy; importing
    the package must not pull in the app for them.
    """
    if name == "create_app":
        from outbox.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
