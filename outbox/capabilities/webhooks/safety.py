"""Where a webhook may go: http(s) URLs whose host resolves to public addresses only.

A staff account that can add an endpoint must not be able to make outbox probe the
internal network (SSRF): the host is resolved once, every address it gives is
checked, and the request is made to a checked address (post.py), never to the name
again, so a second DNS answer (rebinding) cannot send it elsewhere.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from outbox.core.addresses import a_label

SCHEMES = {"http": 80, "https": 443}
MAX_URL = 2000  # characters, the column's size
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(ValueError):
    """A URL or an address a webhook may not go to; the text names the problem."""


@dataclass(frozen=True)
class Target:
    """A checked URL: the host as named (for TLS and Host), and the addresses to connect to."""

    scheme: str
    host: str  # A-label form, as it goes in Host and SNI
    port: int
    path: str  # path and query
    addresses: tuple[str, ...]

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == SCHEMES[self.scheme] else f"{host}:{self.port}"


def parse(url: str) -> tuple[str, str, int, str]:
    """Scheme, host (A-labels), port and path of a webhook URL, or Refused naming the fault."""
    if not url or len(url) > MAX_URL:
        raise Refused(f"the URL must be 1 to {MAX_URL} characters")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise Refused("the URL contains a space or a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"{url!r} is not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Refused(f"{url!r}: only http and https URLs are taken")
    if parts.username is not None or parts.password is not None:
        raise Refused(f"{url!r}: a user name or password in the URL is not taken")
    if not parts.hostname:
        raise Refused(f"{url!r} names no host")
    try:
        host = a_label(parts.hostname.rstrip("."))
    except ValueError as exc:
        raise Refused(f"{url!r}: {exc}") from None
    path = parts.path or "/"
    return scheme, host, port or SCHEMES[scheme], path + (f"?{parts.query}" if parts.query else "")


def public(ip: IP) -> bool:
    """Whether an address is on the public internet: not private, loopback, link-local,
    multicast, reserved or unspecified, nor one of those inside an IPv6 form."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is None and ip in NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None and not public(inner):
            return False
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_private)


def resolve(url: str, allow_private: bool = False) -> Target:
    """The URL checked and its host resolved, each address checked; Refused if any is not public.

    One name that resolves to a public and a private address is refused as a whole: the
    operator of its DNS chooses which one a client would take.
    """
    scheme, host, port, path = parse(url)
    try:
        addresses: list[str] = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise Refused(f"cannot resolve {host}: {exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not allow_private:
        for address in addresses:
            if not public(ipaddress.ip_address(address.split("%")[0])):
                named = f"{address} is" if host.strip("[]") == address else f"{host} is {address},"
                raise Refused(
                    f"{named} a private, loopback, link-local or reserved address "
                    "(OUTBOX_WEBHOOK_ALLOW_PRIVATE=true allows those)"
                )
    return Target(scheme, host, port, path, tuple(addresses))
