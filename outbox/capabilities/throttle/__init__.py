"""Rate limits per route and per recipient domain, held for all workers on all hosts.

A limit is a token bucket row in the database (outbox.throttle.taking, with its
argument for concurrency; the arithmetic and the bucket's size in .buckets). admit()
takes the tokens of a claimed batch in one transaction and hands the claims it cannot
let through back to waiting, due again at their turn: not an attempt. observe() slows a
recipient domain down when its server says so (421, or an enhanced status 4.7.x).
"""

import logging
import re
from datetime import datetime
from typing import Any

from outbox.capabilities import routes
from outbox.capabilities.throttle import keys, taking
from outbox.capabilities.throttle.buckets import Bucket
from outbox.core.deliveries import pending
from outbox.ops import metrics
from outbox.queue import Claim
from outbox.smtp.replies import Result

log = logging.getLogger("outbox.throttle")

# "451 4.7.1 Try again later", "421 4.7.0 Too many connections": the server's own
# word that the sender goes too fast (RFC 3463 4.7.x: security or policy status).
SLOW_DOWN_STATUS = re.compile(r"(?<![\d.])4\.7\.\d{1,3}(?![\d.])")


def admit(
    claims: list[Claim], route: routes.Route, now: datetime, *, domains_taken: bool = False
) -> list[Claim]:
    """The claims that may be sent through route now; the others are handed back to wait.

    Called by a worker just before it sends claims (each with claim.mail). A claim goes
    if every bucket it needs (its route's rate, each limited domain it still sends to)
    has a token; the others go back to waiting (queue.hold), due when their bucket has
    a token for them, with their attempts untouched. Claims with no limit to keep touch
    no row: without any limit configured this costs nothing.

    domains_taken: the claims come on from an earlier route of their chain, which took
    their domains' tokens and failed before any recipient had the mail; the domains have
    not seen them, so only this route's token is taken now.
    """
    domains = {} if domains_taken else routes.table().domains
    if route.rate is None and not domains:
        return claims
    wants = [(c, keys.needs(c.mail, route.name, route.rate, domains)) for c in claims]
    limited = [(c, n) for c, n in wants if n.must]
    if not limited:
        return claims
    admitted, held = taking.take(limited, now)
    if held:
        metrics.count_held(keys.kind_of(name) for name in held)
    through = {c.id for c in admitted} | {c.id for c, n in wants if not n.must}
    return [c for c in claims if c.id in through]


def observe(mail: Any, result: Result, route: routes.Route, now: datetime) -> None:
    """Slow a recipient's domain down when its server asked to (421, or 4.7.x).

    Looked at per recipient (its RCPT or DATA reply) and for the exchange as a whole (a
    421 at MAIL): the latter slows every domain the message was for. Only a domain with
    a limit (its own, or "*") has a rate to halve. The server's own fault (a 421 on
    connecting, result.fault) is the route's, not the domains': it slows the route, if
    the route has a rate.
    """
    if result.fault:
        if route.rate is not None and _slow_down(result.code, result.error):
            reason = _reason(result.code, result.error)
            if taking.slow_down(keys.route_key(route.name), route.rate, now, reason):
                log.warning("slowing route %s down to half its rate: %s", route.name, reason)
        return
    said = {keys.domain_of(a): _reason(r.code, r.text) for a, r in result.recipients.items()
            if _slow_down(r.code, r.text)}  # fmt: skip
    if not said and _slow_down(result.code, result.error):
        reason = _reason(result.code, result.error)
        said = {keys.domain_of(str(e["address"])): reason for e in pending(mail.recipients)}
    if not said:  # the common case: looked at without reading the routes table
        return
    domains = routes.table().domains
    for domain, reason in said.items():
        rate = keys.rate_for(domain, domains)
        if rate is None:
            continue
        if taking.slow_down(keys.domain_key(domain), rate, now, reason):
            log.warning("slowing %s down to half its rate: %s", domain, reason)


def _slow_down(code: int | None, text: str | None) -> bool:
    """Whether a reply asks the sender to slow down."""
    if code == 421:
        return True
    return code is not None and 400 <= code < 500 and bool(SLOW_DOWN_STATUS.search(text or ""))


def _reason(code: int | None, text: str | None) -> str:
    """The reply as the dashboard shows why: its code, then its words."""
    text = (text or "").strip()
    return text if code is None or text.startswith(str(code)) else f"{code} {text}"


def slowed(now: datetime) -> list[Bucket]:
    """The buckets slowed down or holding messages back now (the dashboard's panel)."""
    return taking.held_back(now)
