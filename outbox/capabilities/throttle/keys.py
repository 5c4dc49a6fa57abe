"""Which buckets a message needs a token of: its route's, and one per limited recipient domain."""

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from outbox.capabilities import routes
from outbox.core.deliveries import pending

ANY = "*"  # the domains table's entry for every domain without one of its own


def domain_of(address: str) -> str:
    """An address's domain as buckets are named: as routes (and the suppression list) compare it."""
    return routes.domain_of(address)


def route_key(name: str) -> str:
    return f"route:{name}"


def domain_key(domain: str) -> str:
    return f"domain:{domain}"


def kind_of(key: str) -> str:
    """route or domain, as the metrics label a hold."""
    return key.partition(":")[0]


@dataclass(frozen=True)
class Needs:
    """The buckets one message takes a token of, and their rates (mails a second).

    must: made on first use. own: a domain under "*" that a 421 slowed on its own
    (observe made its row); taken from only if that row is there.
    """

    must: dict[str, float]
    own: dict[str, float]


@functools.lru_cache(maxsize=8)
def _limits(domains: tuple[tuple[str, float], ...]) -> dict[str, float]:
    # OUTBOX_ROUTES gives them so already; a Table made in code may not.
    return {(d if d == ANY else routes.domain_key(d) or d): rate for d, rate in domains}


def limits(domains: Mapping[str, float]) -> dict[str, float]:
    """The per-domain limits of the routes table, their names as buckets name them."""
    return _limits(tuple(sorted(domains.items())))


def rate_for(domain: str, domains: Mapping[str, float]) -> float | None:
    """The limit of a domain: its own, else "*", else None."""
    table = limits(domains)
    found = table.get(domain)
    return found if found is not None else table.get(ANY)


def needs(mail: Any, route_name: str, route_rate: float | None,
          domains: Mapping[str, float]) -> Needs:  # fmt: skip
    """The buckets a claimed message (claim.mail) needs a token of to be sent now."""
    must: dict[str, float] = {}
    own: dict[str, float] = {}
    if route_rate is not None:
        must[route_key(route_name)] = route_rate
    table = limits(domains)
    if table:
        for domain in {domain_of(str(e["address"])) for e in pending(mail.recipients)}:
            if domain in table:
                must[domain_key(domain)] = table[domain]
            elif ANY in table:
                must[domain_key(ANY)] = table[ANY]
                own[domain_key(domain)] = table[ANY]
    return Needs(must, own)
