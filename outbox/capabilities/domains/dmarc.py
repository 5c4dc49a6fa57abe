"""DMARC (RFC 7489): records parsed, the organisational domain, and identifier alignment.

The organisational domain is found by a simple rule, not the Public Suffix List (which
outbox does not carry): the last two labels, or the last three when the second-to-last
is one of the generic second-level labels under a two-letter country code (co.uk,
com.au, org.nz, ...). It is right for the domains most companies send from; a domain
under a private suffix (such as a hosting provider's) is judged as if its provider's.
"""

from dataclasses import dataclass

POLICIES = ("none", "quarantine", "reject")
SECOND_LEVEL = frozenset({"ac", "co", "com", "edu", "gov", "ltd", "me", "net", "or", "org",
                          "plc", "sch"})  # fmt: skip


class Malformed(ValueError):
    """A _dmarc TXT record that receivers would discard."""


@dataclass(frozen=True)
class Record:
    """The parts of a DMARC record outbox judges."""

    policy: str  # p=
    subdomain_policy: str | None  # sp=
    dkim_strict: bool  # adkim=s
    spf_strict: bool  # aspf=s
    reports: str | None  # rua=


def is_dmarc(text: str) -> bool:
    """Whether a TXT string claims to be a DMARC record: it starts with v=DMARC1."""
    return text.replace(" ", "").upper().startswith("V=DMARC1")


def tags(text: str) -> dict[str, str]:
    """A record's tag=value list, names in lower case, whitespace dropped around each."""
    found: dict[str, str] = {}
    for item in text.split(";"):
        name, equals, value = item.partition("=")
        if equals:
            found.setdefault(name.strip().lower(), value.strip())
    return found


def parse(text: str) -> Record:
    """A DMARC record; Malformed if v=DMARC1 is not first or p= is missing or unknown."""
    first = text.split(";", 1)[0].replace(" ", "")
    if first != "v=DMARC1":
        raise Malformed("the record must start with v=DMARC1")
    found = tags(text)
    policy = found.get("p", "").lower()
    if policy not in POLICIES:
        given = f"p={found['p']}" if "p" in found else "no p="
        raise Malformed(f"{given}: p= must be none, quarantine or reject")
    sub = found.get("sp", "").lower() or None
    if sub is not None and sub not in POLICIES:
        raise Malformed(f"sp={found['sp']}: sp= must be none, quarantine or reject")
    for name in ("adkim", "aspf"):
        if found.get(name, "r").lower() not in ("r", "s"):
            raise Malformed(f"{name}={found[name]}: {name}= must be r or s")
    return Record(policy, sub, found.get("adkim", "r").lower() == "s",
                  found.get("aspf", "r").lower() == "s", found.get("rua") or None)  # fmt: skip


def organisational(domain: str) -> str:
    """The organisational domain of a domain, by the rule in this module's docstring."""
    labels = domain.lower().rstrip(".").split(".")
    keep = 2
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in SECOND_LEVEL:
        keep = 3
    return ".".join(labels[-keep:])


def aligned(identifier: str, from_domain: str, strict: bool) -> bool:
    """Whether a DKIM d= or SPF domain aligns with the From domain (RFC 7489 3.1)."""
    one, other = identifier.lower().rstrip("."), from_domain.lower().rstrip(".")
    if strict:
        return one == other
    return organisational(one) == organisational(other)
