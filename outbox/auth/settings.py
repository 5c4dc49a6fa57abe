"""The API tokens' setting: how long a process trusts a token it found live."""

from collections.abc import Mapping
from typing import Any

from outbox.core.config_schema import NUMBER, Group, Setting


def check(config: Mapping[str, Any]) -> None:
    """ValueError if the token cache's time is negative."""
    if config["TOKEN_CACHE_SECONDS"] < 0:
        raise ValueError("TOKEN_CACHE_SECONDS must be 0 or more")


# fmt: off
GROUP = Group(
    "API tokens",
    "How the API processes check the tokens requests carry.",
    (
        # A revoked token keeps working that long in the processes that saw it lately.
        Setting("TOKEN_CACHE_SECONDS", NUMBER, 5.0, unit="seconds",
                description="seconds an API process keeps a token it found live before asking the "
                "database again; a token revoked from another process (`outbox revoke-token`) "
                "keeps working up to that long in the web processes that used it lately. `0` asks "
                "on every request"),
    ),
    check,
)
# fmt: on
