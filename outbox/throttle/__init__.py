"""Rate limits per route and per recipient domain, held for all workers on all hosts."""

from datetime import datetime
from typing import Any

from ..queue import Claim


def admit(claims: list[Claim], route: Any, now: datetime) -> list[Claim]:
    """The claims that may be sent through route now; the others are handed back to wait.

    Called by a worker just before it sends claims (each with claim.mail). Filled in by
    issue 16's throttling; until then every claim is admitted.
    """
    return claims


def observe(mail: Any, result: Any, route: Any, now: datetime) -> None:
    """Note what a server answered a message (slow down on 421 or 4.7.x); no-op for now."""
