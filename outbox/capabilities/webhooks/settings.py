"""The webhooks' settings: a delivery's time, how often the workers run them, where they go."""

from collections.abc import Mapping
from typing import Any

from outbox.core.config_schema import BOOL, NUMBER, TEXT, Group, Setting


def check(config: Mapping[str, Any]) -> None:
    """ValueError if a delivery could take no time or the workers never run them."""
    if config["WEBHOOK_TIMEOUT"] <= 0 or config["WEBHOOK_INTERVAL"] <= 0:
        raise ValueError("WEBHOOK_TIMEOUT and WEBHOOK_INTERVAL must be above 0")


# fmt: off
GROUP = Group(
    "Webhooks",
    "How the workers deliver events to the endpoints (see Webhooks).",
    (
        Setting("WEBHOOK_TIMEOUT", NUMBER, 10.0, unit="seconds",
                description="seconds one webhook request may take, connecting to the last byte "
                "read; a claim on deliveries holds 3 times this plus 5"),
        Setting("WEBHOOK_INTERVAL", NUMBER, 5.0, unit="seconds",
                description="seconds between a worker's runs of due webhook deliveries"),
        Setting("WEBHOOK_ALLOW_PRIVATE", BOOL, False,
                description="let webhooks go to private, loopback, link-local and reserved "
                "addresses; every worker start then logs a warning"),
        Setting("WEBHOOK_CA_FILE", TEXT, None,
                description="PEM file of CAs trusted for https webhooks besides the system's"),
    ),
    check,
)
# fmt: on
