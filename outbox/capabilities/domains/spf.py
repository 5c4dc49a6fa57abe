"""SPF records (RFC 7208): their terms parsed, the DNS look-ups they cost, and whether they
authorise an IP address.

The look-up count is the one RFC 7208 4.6.4 caps at 10: include, a, mx, ptr, exists and
redirect each cost one, over the whole tree of includes, whichever term would match.
"""

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_LOOKUPS = 10  # RFC 7208 4.6.4
LOOKUP_TERMS = ("include", "a", "mx", "ptr", "exists", "redirect")
MECHANISMS = ("all", "include", "a", "mx", "ptr", "ip4", "ip6", "exists")
QUALIFIERS = {"+": "pass", "-": "fail", "~": "softfail", "?": "neutral"}
TERM = re.compile(r"([+\-~?]?)([a-z0-9]+)([:=/]?)(.*)", re.IGNORECASE)
# a and mx's value: a host (or none: the domain's own) and the dual CIDR lengths /v4//v6.
CIDR = re.compile(r"(?P<host>[^/]*)(?:/(?P<v4>[0-9]{1,2}))?(?://(?P<v6>[0-9]{1,3}))?")
IP = ipaddress.IPv4Address | ipaddress.IPv6Address

# What an SPF walk asks DNS: TXT strings of a name, addresses of a name, MX hosts of a name.
Txt = Callable[[str], list[str]]
Addresses = Callable[[str], list[str]]
Exchanges = Callable[[str], list[str]]


class Malformed(ValueError):
    """A record that does not parse: RFC 7208's permerror."""


@dataclass(frozen=True)
class Term:
    """One directive (a qualifier and a mechanism) or modifier (name=value) of a record."""

    name: str  # lower case: all, include, a, mx, ptr, ip4, ip6, exists, redirect, exp, ...
    value: str = ""  # the domain or network after : or =, "" when none
    result: str = "pass"  # what a match gives: pass, fail, softfail or neutral
    modifier: bool = False

    @property
    def costs_lookup(self) -> bool:
        return self.name in LOOKUP_TERMS


def is_spf(text: str) -> bool:
    """Whether a TXT string is an SPF record: "v=spf1" alone or followed by a space."""
    return text.lower() == "v=spf1" or text.lower().startswith("v=spf1 ")


def parse(text: str) -> list[Term]:
    """The terms of an SPF record; Malformed naming the first term that does not parse."""
    if not is_spf(text):
        raise Malformed("the record does not start with v=spf1")
    terms = []
    for word in text.split()[1:]:
        found = TERM.fullmatch(word)
        if found is None:
            raise Malformed(f"{word!r} is not an SPF term")
        qualifier, name, separator, value = found.groups()
        name = name.lower()
        if separator == "=":
            if qualifier:
                raise Malformed(f"{word!r}: a modifier takes no qualifier")
            terms.append(Term(name, value, modifier=True))
            continue
        if name not in MECHANISMS:
            raise Malformed(f"{word!r}: {name} is not an SPF mechanism")
        if separator == "/":  # a/24, mx/24: a prefix length with the current domain
            value = "/" + value
        _check_value(word, name, value)
        terms.append(Term(name, value, QUALIFIERS[qualifier or "+"]))
    if sum(term.name == "redirect" for term in terms) > 1:
        raise Malformed("redirect= is given more than once")
    return terms


def _check_value(word: str, name: str, value: str) -> None:
    if name in ("ip4", "ip6"):
        try:
            network = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise Malformed(f"{word!r}: {value!r} is not an IP network") from None
        if network.version != int(name[2]):
            raise Malformed(f"{word!r}: {value!r} is not an IPv{name[2]} network")
    elif name in ("include", "exists") and not value:
        raise Malformed(f"{word!r}: {name} needs a domain")
    elif name == "all" and value:
        raise Malformed(f"{word!r}: all takes no value")


@dataclass
class Walk:
    """What walking a record and its includes found: look-ups, loops, the first error."""

    lookups: int = 0
    loops: list[str] = field(default_factory=list)  # "a -> b -> a"
    error: str | None = None
    records: dict[str, str] = field(default_factory=dict)  # domain: its SPF record


def record_of(domain: str, txt: Txt) -> str | None:
    """The domain's one SPF record, None if it has none; Malformed if it has more than one."""
    found = [text for text in txt(domain) if is_spf(text)]
    if len(found) > 1:
        raise Malformed(f"{domain} has {len(found)} SPF records (RFC 7208 3.2: one at most)")
    return found[0] if found else None


def walk(domain: str, txt: Txt) -> Walk:
    """Count the look-ups of domain's record over every include and redirect, noting loops."""
    found = Walk()
    _walk(domain, txt, found, (domain,))
    return found


def _walk(domain: str, txt: Txt, found: Walk, path: tuple[str, ...]) -> None:
    try:
        text = record_of(domain, txt)
        if text is None:
            if len(path) > 1:
                found.error = found.error or f"{domain} (from {path[-2]}) has no SPF record"
            return
        found.records[domain] = text
        terms = parse(text)
    except Malformed as exc:
        found.error = found.error or f"{domain}: {exc}"
        return
    for term in terms:
        if not term.costs_lookup:
            continue
        found.lookups += 1
        if term.name not in ("include", "redirect"):
            continue
        target = term.value.lower().rstrip(".")
        if "%" in target:
            continue  # a macro: its domain is known only for a given sender
        if target in path:
            found.loops.append(" -> ".join((*path, target)))
            continue
        if found.lookups > MAX_LOOKUPS * 2:
            return  # far past the limit already: no need to walk on
        _walk(target, txt, found, (*path, target))


def authorises(domain: str, ip: IP, txt: Txt, addresses: Addresses, exchanges: Exchanges) -> str:
    """The result of checking ip against domain's record (RFC 7208 4): pass, fail, softfail,
    neutral, none, or permerror (a loop, over 10 look-ups, a record that does not parse).

    Macros (%{...}) and ptr are not evaluated: a term with a macro or ptr never matches here.
    """
    return _check(domain, ip, txt, addresses, exchanges, [0], (domain,))


def _check(
    domain: str, ip: IP, txt: Txt, addresses: Addresses, exchanges: Exchanges,
    spent: list[int], path: tuple[str, ...],
) -> str:  # fmt: skip
    try:
        text = record_of(domain, txt)
        if text is None:
            return "none"
        terms = parse(text)
    except Malformed:
        return "permerror"
    for term in terms:
        if term.modifier:
            continue
        if term.costs_lookup:
            spent[0] += 1
            if spent[0] > MAX_LOOKUPS:
                return "permerror"
        if term.name == "include":
            target = term.value.lower().rstrip(".")
            if target in path:
                return "permerror"
            inner = _check(target, ip, txt, addresses, exchanges, spent, (*path, target))
            if inner in ("permerror", "none"):
                return "permerror"
            if inner == "pass":
                return term.result
        elif _matches(term, domain, ip, addresses, exchanges):
            return term.result
    redirect = next((t.value.lower().rstrip(".") for t in terms if t.name == "redirect"), None)
    if redirect is None:
        return "neutral"
    spent[0] += 1
    if spent[0] > MAX_LOOKUPS or redirect in path:
        return "permerror"
    found = _check(redirect, ip, txt, addresses, exchanges, spent, (*path, redirect))
    return "permerror" if found == "none" else found


def _matches(term: Term, domain: str, ip: IP, addresses: Addresses, exchanges: Exchanges) -> bool:
    if term.name == "all":
        return True
    if "%" in term.value or term.name in ("ptr", "exists"):
        return False
    if term.name in ("ip4", "ip6"):
        network = ipaddress.ip_network(term.value, strict=False)
        return network.version == ip.version and ip in network
    found = CIDR.fullmatch(term.value)
    if found is None:
        return False
    target = found["host"] or domain
    length = found["v4"] if ip.version == 4 else found["v6"]
    prefix = int(length) if length else ip.max_prefixlen
    hosts = [target] if term.name == "a" else exchanges(target)
    for host in hosts:
        for address in addresses(host):
            try:
                network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
            except ValueError:  # an IPv6 length for an IPv4 address of the host, or past it
                continue
            if network.version == ip.version and ip in network:
                return True
    return False
