"""Whether each DKIM key is published: its TXT record read from DNS and held to the key.

A key whose record is missing, stale or another key's signs mail that every receiver
then finds failing DKIM, worse than no signature at all. `outbox dkim check` asks DNS
(the system's resolver, or DNS_RESOLVERS: a public one, when the company's own DNS
answers otherwise inside) and names what is wrong with each key.
"""

import ipaddress
import re
from dataclasses import dataclass

import dns.exception
import dns.nameserver
import dns.resolver

from outbox.capabilities.dkim.keys import record_name
from outbox.models import DkimKey

TIMEOUT = 5.0  # seconds for each record's lookup, every server and retry included
WHITESPACE = re.compile(r"\s+")


class BadResolvers(ValueError):
    """DNS_RESOLVERS is not a list of host[:port]."""


@dataclass(frozen=True)
class Finding:
    """What DNS holds for one key: None if its record is this key's, else what is wrong."""

    name: str  # the record's name, SELECTOR._domainkey.DOMAIN.
    problem: str | None


def resolver(setting: str) -> dns.resolver.Resolver:
    """The system's resolver, or one asking the servers of DNS_RESOLVERS ("host[:port], ...")."""
    if not setting.strip():
        found = dns.resolver.Resolver()
    else:
        found = dns.resolver.Resolver(configure=False)
        found.nameservers = [_server(item.strip()) for item in setting.split(",") if item.strip()]
    found.lifetime = TIMEOUT
    return found


def _server(item: str) -> dns.nameserver.Nameserver:
    host, port = item, "53"
    if item.startswith("["):  # [IPv6]:port
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":") or "53"
    elif item.count(":") == 1:
        host, port = item.split(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BadResolvers(f"OUTBOX_DNS_RESOLVERS: {item!r} is not host[:port]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise BadResolvers(f"OUTBOX_DNS_RESOLVERS: {host!r} is not an IP address") from None
    return dns.nameserver.Do53Nameserver(host, int(port))


def tags(text: str) -> dict[str, str]:
    """A DKIM record's tag=value list (RFC 6376 3.2), whitespace around each dropped."""
    found: dict[str, str] = {}
    for item in text.split(";"):
        name, equals, value = item.partition("=")
        if equals:
            found.setdefault(name.strip(), value.strip())
    return found


def check(key: DkimKey, asking: dns.resolver.Resolver) -> Finding:
    """Read the key's TXT record and hold it to the key."""
    name = record_name(key)
    try:
        answer = asking.resolve(name, "TXT", search=False)
    except dns.resolver.NXDOMAIN:
        return Finding(name, "no record: the name does not exist in DNS")
    except dns.resolver.NoAnswer:
        return Finding(name, "no TXT record at the name")
    except dns.exception.Timeout:
        return Finding(name, f"DNS gave no answer within {TIMEOUT:g} s")
    except dns.resolver.NoNameservers as exc:
        return Finding(name, f"no DNS server answered: {exc}")
    texts = [b"".join(record.strings).decode("ascii", "replace") for record in answer]
    records = [tags(text) for text in texts]
    records = [r for r in records if r.get("v", "DKIM1") == "DKIM1" and "p" in r]
    if not records:
        return Finding(name, "the TXT records there hold no DKIM key (no p= tag)")
    if len(records) > 1:
        return Finding(name, f"{len(records)} DKIM records: receivers may take any of them")
    record, kind = records[0], key.algorithm.partition("-")[0]
    published = WHITESPACE.sub("", record["p"])
    if not published:
        return Finding(name, "the key is revoked there (empty p=)")
    if published != key.public_key:
        return Finding(name, "the record holds another key (p= differs): mail signed with this"
                             " one fails DKIM; publish the record `outbox dkim list --records`"
                             " prints")  # fmt: skip
    if record.get("k", "rsa") != kind:
        return Finding(name, f"the record says k={record.get('k', 'rsa')}, the key is {kind}")
    return Finding(name, None)
