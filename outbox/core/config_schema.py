"""How settings are declared: Setting, Group, and the kinds an OUTBOX_* string is read as."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Check = Callable[[Mapping[str, Any]], None]


@dataclass(frozen=True)
class Kind:
    """A type a setting holds: its name in a reader's words and how a string becomes one."""

    words: str
    read: Callable[[str], Any]  # ValueError(what was expected) for a string it cannot read


def read_bool(raw: str) -> bool:
    """The words for yes and no that environment variables use."""
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("true or false")


def read_int(raw: str) -> int:
    """A whole number."""
    try:
        return int(raw)
    except ValueError:
        raise ValueError("a number") from None


def read_float(raw: str) -> float:
    """Any number."""
    try:
        return float(raw)
    except ValueError:
        raise ValueError("a number") from None


def domain_names(raw: str) -> frozenset[str]:
    """Comma-separated domain names as a set: lower case, no dots around them."""
    return frozenset(name.strip().strip(".").lower() for name in raw.split(",") if name.strip())


BOOL = Kind("true or false", read_bool)
INT = Kind("integer", read_int)
NUMBER = Kind("number", read_float)
TEXT = Kind("text", str)
DOMAINS = Kind("domain names", domain_names)


@dataclass(frozen=True)
class Setting:
    """One setting: OUTBOX_<name> in the environment, <name> in instance/config.py."""

    name: str
    kind: Kind
    default: Any
    description: str  # a clause, lower case first, no full stop: the reference adds them
    unit: str | None = None  # what a number counts: seconds, bytes, connections ...

    def parse(self, raw: str) -> Any:
        """One environment string as this setting's kind; ValueError naming the variable."""
        try:
            return self.kind.read(raw)
        except ValueError as exc:
            raise ValueError(f"OUTBOX_{self.name}: expected {exc}, got {raw!r}") from None


def _no_check(config: Mapping[str, Any]) -> None:
    """Settings any value of whose kind works."""


@dataclass(frozen=True)
class Group:
    """The settings of one part of outbox, and the check that refuses what cannot work.

    check gets the whole configuration (a group may compare its settings with another
    group's) and raises ValueError naming the setting and the problem.
    """

    name: str
    about: str  # one sentence: what these settings govern
    settings: tuple[Setting, ...]
    check: Check = _no_check
