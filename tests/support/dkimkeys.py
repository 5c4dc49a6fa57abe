"""DKIM helpers for the tests: signers made without a database, and a DNS of published records."""

import re
from collections.abc import Callable

import dkim
from cryptography.hazmat.primitives import serialization

from outbox.capabilities.dkim import keys
from outbox.mail.signing import Signer

SIGNATURE = re.compile(rb"^DKIM-Signature:.*?(?=^\S)", re.MULTILINE | re.DOTALL)


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


def other_body(message: bytes) -> bytes:
    """message with the last character of its body changed (whatever its encoding)."""
    last = message.rstrip(b"\r\n")
    changed = b"Q" if last[-1:] != b"Q" else b"R"
    return last[:-1] + changed + message[len(last) :]


def verifies(message: bytes, records: dict[bytes, bytes], index: int = 0) -> bool:
    """Whether dkimpy verifies the index-th signature of message (0: the topmost)."""
    try:
        return bool(dkim.DKIM(message).verify(idx=index, dnsfunc=dns(records)))
    except dkim.DKIMException:  # a body hash mismatch is raised, not returned
        return False


def add_key(runner, domain: str, selector: str, *options: str) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    """`outbox dkim add`, and the record it printed, as DNS would serve it."""
    result = runner.invoke(args=["dkim", "add", domain, "--selector", selector, *options])
    assert result.exit_code == 0, result.output
    records = published(result.output)
    assert len(records) == 1
    return records


def tags(message: bytes, index: int = 0) -> dict[str, str]:
    """The tags of a mail's index-th DKIM-Signature."""
    header = SIGNATURE.findall(message)[index].decode()
    value = re.sub(r"\s+", "", header.partition(":")[2])
    return dict(tag.split("=", 1) for tag in value.split(";") if tag)
