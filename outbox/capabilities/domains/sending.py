"""Which domains outbox sends as, and through which addresses: what the doctor checks."""

import ipaddress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from outbox.capabilities import routes
from outbox.capabilities.dkim import keys
from outbox.capabilities.domains.asking import Asker, Unanswered
from outbox.core.addresses import a_label
from outbox.models import DkimKey, Message
from outbox.models.db import db

RECENT = timedelta(days=30)  # a From domain counts while mail from it is this recent
FROM, SIGNS, BOUNCES = "from", "dkim", "bounces"
ROLES = (FROM, SIGNS, BOUNCES)


@dataclass
class Sending:
    """The domains with what each is used for, the DKIM keys, and the bounce domain."""

    roles: dict[str, set[str]] = field(default_factory=dict)  # domain: FROM, SIGNS, BOUNCES
    keys: dict[str, list[DkimKey]] = field(default_factory=dict)  # domain: its keys
    bounce_domain: str | None = None

    def envelope_domain(self, from_domain: str) -> str:
        """The MAIL FROM domain of mail from from_domain: the bounce address's, else its own."""
        return self.bounce_domain or from_domain

    def is_envelope(self, domain: str) -> bool:
        """Whether receivers check SPF of domain and send bounces there."""
        if self.bounce_domain is not None:
            return domain == self.bounce_domain
        return FROM in self.roles.get(domain, set())

    def signing_domain(self, from_domain: str) -> str | None:
        """The d= of mail from from_domain: its own key's, else its nearest parent's (as the
        keyring chooses), None if no key signs it."""
        labels = from_domain.split(".")
        for start in range(len(labels)):
            found = ".".join(labels[start:])
            if self.keys.get(found):
                return found
        return None


def domain_of(address: str) -> str | None:
    """An address's domain as DNS names it (A-labels, lower case), None if it has none."""
    domain = address.rpartition("@")[2].strip().rstrip(".")
    try:
        return a_label(domain).lower() if domain else None
    except ValueError:
        return None


def read(config: Any, now: datetime) -> Sending:
    """The From domains of messages created since now - RECENT, the DKIM keys' domains and
    the bounce address's domain. The session's transaction is ended: DNS answers next."""
    found = Sending()
    stmt = select(Message.from_addr).where(Message.created_at >= now - RECENT).distinct()
    for address in db.session.scalars(stmt):
        domain = domain_of(address)
        if domain:
            found.roles.setdefault(domain, set()).add(FROM)
    for key in keys.listed():
        found.roles.setdefault(key.domain, set()).add(SIGNS)
        copy = DkimKey(domain=key.domain, selector=key.selector, algorithm=key.algorithm,
                       public_key=key.public_key)  # fmt: skip
        found.keys.setdefault(key.domain, []).append(copy)  # a copy outlives the transaction
    db.session.commit()
    bounce = config.get("BOUNCE_ADDRESS")
    if bounce:
        found.bounce_domain = domain_of(str(bounce))
        if found.bounce_domain:
            found.roles.setdefault(found.bounce_domain, set()).add(BOUNCES)
    return found


@dataclass(frozen=True)
class Outgoing:
    """An address a route's server is reached at, which SPF must authorise."""

    route: str
    host: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address


def outgoing(asker: Asker) -> tuple[list[Outgoing], list[str]]:
    """The addresses of the routes' servers, and notes on those left out (loopback: the
    relay there sends on from an address outbox does not know; names DNS does not know)."""
    found: list[Outgoing] = []
    notes: list[str] = []
    for route in routes.table().routes.values():
        host = route.settings.server
        try:
            addresses = [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            try:
                addresses = [ipaddress.ip_address(a) for a in asker.addresses(host)]
            except Unanswered as exc:
                notes.append(f"route {route.name}: {host} not looked up ({exc})")
                continue
            if not addresses:
                notes.append(f"route {route.name}: DNS has no address for {host}")
        for address in addresses:
            if address.is_loopback:
                notes.append(f"route {route.name}: {host} is this machine; the relay there "
                             "sends on from an address outbox cannot see, not checked")  # fmt: skip
            else:
                found.append(Outgoing(route.name, host, address))
    return found, notes
