"""The domain doctor's settings: how long its answers are kept, how long DNS may take."""

from typing import Any

from outbox.core.config_schema import NUMBER, Group, Setting


def check(config: Any) -> None:
    """ValueError naming the setting if a time is not above 0."""
    for name in ("DOMAINS_CACHE", "DOMAINS_DNS_TIMEOUT"):
        if config[name] <= 0:
            raise ValueError(f"{name} must be above 0")


# fmt: off
GROUP = Group(
    "Domains",
    "The domain doctor: `outbox domains check`, the Domains page and `GET /api/domains` "
    "(see Deliverability).",
    (
        Setting("DOMAINS_CACHE", NUMBER, 300.0, unit="seconds",
                description="how long the page and the API show one round of DNS checks before "
                "asking again (`outbox domains check` always asks)"),
        Setting("DOMAINS_DNS_TIMEOUT", NUMBER, 3.0, unit="seconds",
                description="seconds each DNS question of the domain doctor may take, every "
                "server of `OUTBOX_DNS_RESOLVERS` and retry included; after one goes "
                "unanswered the round asks no more"),
    ),
    check,
)
# fmt: on
