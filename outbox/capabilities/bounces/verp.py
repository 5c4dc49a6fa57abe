"""VERP return paths: an envelope sender per recipient that names the message and the recipient.

With BOUNCE_ADDRESS set to bounces@example.com, the mail for the recipient at index i of
message n goes with MAIL FROM:<bounces+n-i-MAC@example.com>, where MAC is an HMAC of
"n-i" keyed with the secret key (truncated to 80 bits, base32 in lower case: some relays
fold the local part's case). A bounce that comes back to that address names its message
and recipient without trusting anything in the bounce itself, and nobody without the
key can make an address that names another message.
"""

import base64
import functools
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import current_app

from outbox.core.addresses import a_label

MAC_CHARS = 16  # base32 characters: 80 bits
LOCAL_PART_OCTETS = 64  # RFC 5321 4.5.3.1.1
# The longest token: a 64-bit message id, a recipient index and the MAC. A recipient past
# MAX_INDEX (a million recipients in one message) goes with the bare bounce address.
MAX_INDEX = 999_999
LONGEST_TOKEN = len(f"{2**63}-{MAX_INDEX}-") + MAC_CHARS
TOKEN = re.compile(rf"([0-9]{{1,19}})-([0-9]{{1,6}})-([a-z2-7]{{{MAC_CHARS}}})")


@dataclass(frozen=True)
class Target:
    """What a VERP address names: a message and the index of its recipient entry."""

    message_pk: int
    index: int


def check(config: Mapping[str, Any]) -> None:
    """ValueError if BOUNCE_ADDRESS cannot carry a token within the 64-octet local part."""
    address = config.get("BOUNCE_ADDRESS")
    if not address:
        return
    local, at, domain = str(address).rpartition("@")
    if not at or not local or not domain or not local.isascii() or "+" in local:
        raise ValueError(
            f"BOUNCE_ADDRESS {address!r}: an ASCII address without '+' in its local part, "
            "such as bounces@example.com"
        )
    if len(local) + 1 + LONGEST_TOKEN > LOCAL_PART_OCTETS:
        room = f"{LONGEST_TOKEN + 1} octets of {LOCAL_PART_OCTETS}"
        raise ValueError(f"BOUNCE_ADDRESS {address!r}: no room for the VERP token ({room})")
    try:
        a_label(domain)
    except ValueError as exc:
        raise ValueError(f"BOUNCE_ADDRESS {address!r}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _key(secret: str | bytes) -> bytes:
    raw = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(b"outbox verp\0" + raw).digest()  # a key of its own, not the session's


def _mac(key: bytes, pk: int, index: int) -> str:
    digest = hmac.digest(key, f"{pk}-{index}".encode(), "sha256")
    return base64.b32encode(digest[: MAC_CHARS * 5 // 8]).decode().lower()  # 5 bits a character


def address_for(bounce_address: str, secret: str | bytes, pk: int, index: int) -> str:
    """The return path of one recipient of one message, as it goes on the wire."""
    local, _, domain = bounce_address.rpartition("@")
    return f"{local}+{pk}-{index}-{_mac(_key(secret), pk, index)}@{a_label(domain)}"


def return_paths(pk: int, entries: list[dict[str, Any]]) -> dict[str, str] | None:
    """Each stored recipient address's return path, or None when VERP is off.

    An address listed twice (To and Bcc) takes the index of its first entry.
    """
    config = current_app.config
    bounce_address = config.get("BOUNCE_ADDRESS")
    if not bounce_address:
        return None
    local, _, domain = bounce_address.rpartition("@")
    key, domain = _key(current_app.secret_key or ""), a_label(domain)
    paths: dict[str, str] = {}
    for index, entry in enumerate(entries):
        if entry["address"] in paths:
            continue
        token = f"+{pk}-{index}-{_mac(key, pk, index)}" if index <= MAX_INDEX else ""
        paths[entry["address"]] = f"{local}{token}@{domain}"
    return paths


def target(address: str, bounce_address: str, secret: str | bytes) -> Target | None:
    """The message and recipient a VERP address names, None if it is not a valid one.

    The local part's case and the domain's form (U-label or A-label, any case) do not
    matter; the MAC does.
    """
    local, at, domain = address.strip().strip("<>").rpartition("@")
    base, _, bdomain = bounce_address.rpartition("@")
    if not at or not _same_domain(domain, bdomain):
        return None
    prefix, plus, token = local.partition("+")
    found = TOKEN.fullmatch(token.lower())
    if not plus or prefix.lower() != base.lower() or found is None:
        return None
    pk, index = int(found[1]), int(found[2])
    if not hmac.compare_digest(found[3], _mac(_key(secret), pk, index)):
        return None
    return Target(pk, index)


def is_bounce_address(address: str, bounce_address: str, secret: str | bytes) -> bool:
    """Whether mail to address is for outbox: the bounce address itself or a valid VERP form."""
    local, at, domain = address.strip().strip("<>").rpartition("@")
    base, _, bdomain = bounce_address.rpartition("@")
    if at and local.lower() == base.lower() and _same_domain(domain, bdomain):
        return True
    return target(address, bounce_address, secret) is not None


def _same_domain(one: str, other: str) -> bool:
    try:
        return a_label(one).lower() == a_label(other).lower()
    except ValueError:
        return False
