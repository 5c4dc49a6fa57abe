"""SMTP routes: the servers outbox sends through, the rules that choose one, their limits."""

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from flask import Flask, current_app

from outbox import smtp
from outbox.capabilities.suppression import key_of
from outbox.core import deliveries
from outbox.core.streams import DEFAULT as DEFAULT_STREAM

log = logging.getLogger("outbox.routes")
# The most sending threads (lanes, worker.py) one process runs, whatever the routes allow.
MAX_LANES = 64
KEY = "outbox.routes"  # where an app keeps its Table, in app.extensions
LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN = re.compile(rf"(?=.{{1,253}}$){LABEL}(?:\.{LABEL})*")


@dataclass(frozen=True)
class Route:
    """One SMTP server with how to reach it and how hard to use it."""

    name: str
    settings: smtp.HostSettings
    max_connections: int = 1  # open at once by each worker process
    rate: float | None = None  # mails a second over all hosts; None: no limit
    streams: tuple[str, ...] | None = None  # the streams it carries (core.streams); None: all

    def takes(self, stream: str) -> bool:
        """Whether mail of this stream may go through this route."""
        return self.streams is None or stream in self.streams


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
    # Each rule with its domains as compared and its routes in order, made once.
    _chains: tuple[tuple[Rule, tuple[Route, ...]], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        chains = []
        for rule in self.rules:
            names = (rule.route, *rule.fallback)
            unknown = [name for name in names if name not in self.routes]
            if unknown:
                raise ValueError(f"a rule names {unknown[0]!r}, which is not a route")
            compared = replace(rule, sender_domain=_compared(rule.sender_domain),
                               recipient_domain=_compared(rule.recipient_domain))  # fmt: skip
            chain = tuple(self.routes[name] for name in dict.fromkeys(names))
            chains.append((compared, chain))
        object.__setattr__(self, "_chains", tuple(chains))

    @property
    def lanes(self) -> int:
        """Sending threads a worker process runs: one per connection its routes allow."""
        return min(sum(route.max_connections for route in self.routes.values()), MAX_LANES)

    @property
    def first(self) -> Route:
        """The default route: the first of the file, or the one of OUTBOX_MAIL_*."""
        return next(iter(self.routes.values()))

    def choose(self, mail: Any) -> tuple[Route, ...]:
        """The routes to try for a claimed message (claim.mail), in order: first match wins.

        A rule matches when every condition it gives holds: the From address's domain is
        sender_domain; every recipient still to be sent to (deliveries.pending) is in
        recipient_domain, so a message to several domains matches no recipient_domain rule
        and goes by the later rules (the relay of one domain is never handed another's
        mail); the priority is at least min_priority. The matching rule's route comes
        first, then its fallbacks; with no match, the first route alone. Routes that list
        streams carry only those: they are left out of a chain for mail of another stream
        (a rule left with none is passed over), and the default is then the first route
        that carries the mail's stream.
        """
        sender: str | None = None
        recipients: set[str] | None = None
        stream = str(getattr(mail, "stream", None) or DEFAULT_STREAM)
        for rule, whole in self._chains:
            chain = tuple(route for route in whole if route.takes(stream))
            if not chain:
                continue
            if rule.min_priority is not None and mail.priority < rule.min_priority:
                continue
            if rule.sender_domain is not None:
                sender = sender or domain_of(mail.from_addr)
                if sender != rule.sender_domain:
                    continue
            if rule.recipient_domain is not None:
                if recipients is None:
                    pending = deliveries.pending(mail.recipients)
                    recipients = {domain_of(entry.address) for entry in pending}
                if recipients != {rule.recipient_domain}:
                    continue
            return chain
        if self.first.takes(stream):
            return (self.first,)
        return (next((r for r in self.routes.values() if r.takes(stream)), self.first),)


def domain_of(address: str) -> str:
    """An address's domain as rules compare it: as the suppression list keys it."""
    return key_of(address).rpartition("@")[2]


def domain_key(name: Any) -> str | None:
    """A domain name as rules and limits compare it, None if it is not a domain name.

    The suppression list's rule (lower case, IDNA2008 A-labels) is the one owner of how
    a domain compares, so the name goes through it as an address's domain would.
    """
    if not isinstance(name, str) or not name.strip() or "@" in name:
        return None
    key = domain_of(f"postmaster@{name.strip().rstrip('.')}")
    return key if DOMAIN.fullmatch(key) else None


def _compared(name: str | None) -> str | None:
    if name is None:
        return None
    found = domain_key(name)
    if found is None:
        raise ValueError(f"{name!r} is not a domain name")
    return found


def default(config: Mapping[str, Any]) -> Table:
    """The one route the OUTBOX_MAIL_* settings describe, used when OUTBOX_ROUTES is unset."""
    settings = smtp.HostSettings(
        server=config["MAIL_SERVER"], port=config["MAIL_PORT"], timeout=config["SMTP_TIMEOUT"],
        use_ssl=config["MAIL_USE_SSL"], use_tls=config["MAIL_USE_TLS"],
        username=config["MAIL_USERNAME"], password=config["MAIL_PASSWORD"],
        verify=config["MAIL_TLS_VERIFY"], ca_file=config["MAIL_TLS_CA_FILE"] or None,
        allow_plaintext_auth=config["MAIL_ALLOW_PLAINTEXT_AUTH"],
    )  # fmt: skip
    route = Route("default", settings, max_connections=config["MAIL_MAX_CONNECTIONS"])
    return Table({route.name: route})


def table() -> Table:
    """The current app's routes: OUTBOX_ROUTES as read when the app was made, else the
    default route of the OUTBOX_MAIL_* settings as they are now."""
    found: Table | None = current_app.extensions.get(KEY)
    return found or default(current_app.config)


def warn_unsafe(app: Flask) -> None:
    """Log a warning for each TLS safeguard the routes turn off; once per worker start.

    With OUTBOX_ROUTES, each of its routes by name (the OUTBOX_MAIL_* server is not used);
    without, smtp.warn_unsafe for the default route of the OUTBOX_MAIL_* settings.
    """
    loaded: Table | None = app.extensions.get(KEY) if app.config["ROUTES"] else None
    if loaded is None:
        smtp.warn_unsafe(app.config)
        return
    for route in loaded.routes.values():
        settings = route.settings
        if (settings.use_ssl or settings.use_tls) and not settings.verify:
            log.warning(
                "route %s: TLS verification is off (tls_verify or OUTBOX_MAIL_TLS_VERIFY): the "
                "certificate and host name of %s are not checked, and whoever answers gets the "
                "mail and the SMTP password", route.name, settings.where,
            )  # fmt: skip
        elif settings.password and not (settings.use_ssl or settings.use_tls):
            log.warning(
                "route %s: OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH is on and tls is none: the SMTP "
                "password goes to %s unencrypted", route.name, settings.where,
            )  # fmt: skip
