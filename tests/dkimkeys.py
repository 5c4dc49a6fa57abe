"""DKIM helpers for the tests: signers made without a database, and a DNS of published records."""

import re
from collections.abc import Callable

from cryptography.hazmat.primitives import serialization

from outbox.dkim import keys
from outbox.dkim.signing import Signer

# A zone line as `outbox dkim add` prints it: name, IN TXT, and quoted strings.
ZONE_LINE = re.compile(r'^\s*(\S+\._domainkey\.\S+\.) IN TXT \( ((?:"[^"]*" )+)\)$', re.MULTILINE)


def signer(domain: str, selector: str, kind: str = "rsa") -> tuple[Signer, str, str]:
    """A new key as a worker signs with it, its private PEM and its record's value."""
    pair = keys.make_pair(kind)
    private = serialization.load_pem_private_key(pair.private_pem.encode(), None)
    found = Signer(domain.encode(), selector.encode(), pair.algorithm.encode(), private)  # type: ignore[arg-type]
    return found, pair.private_pem, f"v=DKIM1; k={kind}; p={pair.public}"


def published(output: str) -> dict[bytes, bytes]:
    """The TXT records in a command's output, by name, their strings joined as DNS does."""
    return {
        name.encode(): "".join(re.findall(r'"([^"]*)"', strings)).encode()
        for name, strings in ZONE_LINE.findall(output)
    }


def dns(records: dict[bytes, bytes]) -> Callable[..., bytes | None]:
    """A dnsfunc for dkim.verify answering from records (None: no such record)."""

    def lookup(name: bytes, timeout: float = 5) -> bytes | None:
        return records.get(name)

    return lookup
