"""Delivery's settings: mail out over SMTP, into the capture store, or each by its address."""

from collections.abc import Mapping
from typing import Any

from outbox.core.config_schema import TEXT, Group, Kind, Setting

SMTP, CAPTURE, ALLOWLIST = "smtp", "capture", "allowlist"
MODES = (SMTP, CAPTURE, ALLOWLIST)


def read_allowed(raw: str) -> frozenset[str]:
    """Comma-separated addresses and @domains, lower case; ValueError for anything else."""
    found = set()
    for item in raw.split(","):
        entry = item.strip().lower()
        if not entry:
            continue
        local, at, domain = entry.rpartition("@")
        if not at or not domain or "." not in domain.strip(".") or " " in entry:
            raise ValueError("addresses (name@example.com) and domains (@example.com)")
        found.add(f"{local}@{domain.strip('.')}")
    return frozenset(found)


ALLOWED = Kind("addresses and @domains", read_allowed)


def check(config: Mapping[str, Any]) -> None:
    """ValueError if DELIVERY names no mode, or allowlist is on with nobody on the list."""
    mode = config["DELIVERY"]
    if mode not in MODES:
        raise ValueError(f"DELIVERY (OUTBOX_DELIVERY) must be one of {', '.join(MODES)}, "
                         f"not {mode!r}")  # fmt: skip
    allowed = config["DELIVERY_ALLOW"]
    if isinstance(allowed, str):  # set in instance/config.py as text
        read_allowed(allowed)
    if mode == ALLOWLIST and not allowed:
        raise ValueError("DELIVERY=allowlist needs DELIVERY_ALLOW (OUTBOX_DELIVERY_ALLOW): "
                         "the addresses and @domains that may receive mail")  # fmt: skip


# fmt: off
GROUP = Group(
    "Delivery",
    "Whether mail leaves at all: a staging copy of outbox keeps it instead (see Capture mode).",
    (
        Setting("DELIVERY", TEXT, SMTP,
                description="`smtp` sends every message over SMTP; `capture` sends none: each "
                "goes through the whole pipeline and is kept on the Captured page as it would "
                "have gone, every recipient accepted; `allowlist` sends to the recipients on "
                "`OUTBOX_DELIVERY_ALLOW` and captures the rest (see Capture mode)"),
        Setting("DELIVERY_ALLOW", ALLOWED, frozenset(),
                description="with `OUTBOX_DELIVERY=allowlist`: the addresses "
                "(`qa@example.com`) and whole domains (`@example.com`) that get mail over "
                "SMTP, comma-separated, compared without regard to case"),
    ),
    check,
)
# fmt: on
