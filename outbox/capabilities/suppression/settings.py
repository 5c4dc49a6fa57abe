"""The suppression list's setting: what a message to a suppressed address gets."""

from collections.abc import Mapping
from typing import Any

from outbox.core.config_schema import TEXT, Group, Setting

CHOICES = ("mark", "reject")


def check(config: Mapping[str, Any]) -> None:
    """ValueError if SUPPRESSED is neither mark nor reject."""
    if config["SUPPRESSED"] not in CHOICES:
        raise ValueError("SUPPRESSED (OUTBOX_SUPPRESSED) must be mark or reject")


# fmt: off
GROUP = Group(
    "Suppression list",
    "What outbox does with the addresses it never sends to (see Suppression list).",
    (
        Setting("SUPPRESSED", TEXT, "mark",
                description="a recipient on the suppression list: `mark` stores it as "
                "`suppressed`, never sent to (the message fails if no one is left); `reject` "
                "refuses the message with `422` naming the address (see Suppression list)"),
    ),
    check,
)
# fmt: on
