"""The messages' settings: their largest size, the default sender, special-use domains taken."""

from collections.abc import Mapping
from typing import Any

from outbox.core.config_schema import DOMAINS, INT, TEXT, Group, Setting, domain_names


def check(config: Mapping[str, Any]) -> None:
    """ValueError if ALLOWED_SPECIAL_DOMAINS is not a set of domain names as compared."""
    allowed = config["ALLOWED_SPECIAL_DOMAINS"]
    if isinstance(allowed, str) or any(not isinstance(d, str) or d not in domain_names(d)
                                       for d in allowed):  # fmt: skip
        raise ValueError("ALLOWED_SPECIAL_DOMAINS is a set of domain names in lower case, "
                         "without dots around them, such as {'local'}")  # fmt: skip


# fmt: off
GROUP = Group(
    "Messages",
    "What any message may be: its size, its From when it names none, the addresses taken.",
    (
        Setting("MAX_MESSAGE_BYTES", INT, 25 * 1024 * 1024, unit="bytes",
                description="the largest request body, and the largest total of bodies and "
                "attachments"),
        Setting("MAIL_DEFAULT_SENDER", TEXT, None,
                description="From address of messages that name none; without it `from` is "
                "required"),
        # Special-use domains (RFC 6761) whose addresses are taken as any other's, for
        # mail inside a company; in instance/config.py a set of names.
        Setting("ALLOWED_SPECIAL_DOMAINS", DOMAINS, frozenset(),
                description="special-use domains whose addresses are taken like any other, "
                "comma-separated: `local,internal` takes `ann@host.local`. Without it, addresses "
                "in `.local`, `.test`, `.onion`, `.invalid`, `.arpa` and `localhost` subdomains "
                "are refused (email-validator's special-use list), by the API and the compose "
                'page alike. In `instance/config.py`, `ALLOWED_SPECIAL_DOMAINS = {"local"}`'),
    ),
    check,
)
# fmt: on
