"""SMTP routes: the servers outbox sends through, the rules that choose one, their limits."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import current_app

from .. import smtp


@dataclass(frozen=True)
class Route:
    """One SMTP server with how to reach it and how hard to use it."""

    name: str
    settings: smtp.HostSettings
    max_connections: int = 1  # open at once by each worker process
    rate: float | None = None  # mails a second over all hosts; None: no limit


@dataclass(frozen=True)
class Rule:
    """Messages matching every condition given go through route, then fallback in turn."""

    route: str
    fallback: tuple[str, ...] = ()
    sender_domain: str | None = None
    recipient_domain: str | None = None
    min_priority: int | None = None


@dataclass(frozen=True)
class Table:
    """Every route (the first is the default), the rules, and the per-domain limits."""

    routes: dict[str, Route]
    rules: tuple[Rule, ...] = ()
    domains: dict[str, float] = field(default_factory=dict)  # mails a second; "*": the rest

    def choose(self, mail: Any) -> tuple[Route, ...]:
        """The routes to try for a claimed message (claim.mail), in order: first match wins."""
        # Filled in with the rules of OUTBOX_ROUTES (issue 16); until then, the default.
        return (next(iter(self.routes.values())),)


def default(config: Mapping[str, Any]) -> Table:
    """The one route the OUTBOX_MAIL_* settings describe, used when OUTBOX_ROUTES is unset."""
    mail = current_app.extensions["mail"]
    settings = smtp.HostSettings.of(mail, config)
    route = Route("default", settings, max_connections=config["MAIL_MAX_CONNECTIONS"])
    return Table({route.name: route})


def table() -> Table:
    """The current app's routes: OUTBOX_ROUTES as read when the app was made, else the
    default route of the OUTBOX_MAIL_* settings as they are now."""
    found: Table | None = current_app.extensions.get("outbox.routes")
    return found or default(current_app.config)
