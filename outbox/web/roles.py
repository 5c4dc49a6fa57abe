"""The pages' role checks: `requires(action)` on a view, `can(action)` in code and templates."""

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from flask import abort
from flask_login import current_user

from outbox.core.roles import ACTIONS, ROLES

View = TypeVar("View", bound=Callable[..., Any])


def can(action: str) -> bool:
    """Whether the signed-in person's role allows the action (outbox.roles.ACTIONS) or is at
    least the role named instead ("sender")."""
    return bool(current_user and current_user.is_authenticated and current_user.can(action))


def refuse_unless(action: str) -> None:
    """Answer 403 (a styled page) unless the signed-in person may do the action."""
    if not can(action):
        needed = action if action in ROLES else ACTIONS.get(action, "admin")
        abort(403, description=f"Your role may not do this; it needs the {needed} role.")


def requires(action: str) -> Callable[[View], View]:
    """A view only people whose role allows the action (or is at least the role) may reach.

    Others get 403: `@requires("resend")`, `@requires("admin")`.
    """

    def decorate(view: View) -> View:
        @wraps(view)
        def checked(*args: Any, **kwargs: Any) -> Any:
            refuse_unless(action)
            return view(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate
