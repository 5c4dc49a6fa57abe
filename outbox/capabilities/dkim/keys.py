"""DKIM keys as stored: checking a domain and selector, making a key pair, the DNS record."""

import base64
import re
from dataclasses import dataclass
from datetime import datetime

import idna
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from outbox.models.db import db
from outbox.models.dkim import DkimKey

# The command's names for the algorithms, and the a= each key signs with.
ALGORITHMS = {"rsa": "rsa-sha256", "ed25519": "ed25519-sha256"}
# RSA sizes a key may have: under 1024 bits verifiers refuse it (RFC 8301 3.2), over
# 4096 some resolvers and verifiers choke on the record.
RSA_BITS = (1024, 2048, 3072, 4096)
LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
SELECTOR = re.compile(f"{LABEL}(?:\\.{LABEL})*")
DOMAIN = SELECTOR  # after IDNA2008: A-labels of letters, digits and inner hyphens
TXT_STRING = 255  # octets in one character-string of a TXT record (RFC 1035 3.3)


class Invalid(ValueError):
    """A domain, selector, algorithm or size that cannot make a key; says which and why."""


def signing_domain(text: str) -> str:
    """A domain as keys are stored and looked up: IDNA2008 A-labels, lower case, no final dot."""
    name = text.strip().removesuffix(".")
    try:
        found = idna.encode(name, uts46=True, transitional=False).decode("ascii").lower()
    except UnicodeError as exc:  # idna.IDNAError is one
        raise Invalid(f"bad domain {text!r}: {exc}") from None
    if len(found) > 253 or not DOMAIN.fullmatch(found):
        raise Invalid(f"bad domain {text!r}: not a host name of letters, digits and hyphens")
    return found


def selector_of(text: str) -> str:
    """A selector as stored: lower case, DNS labels, at most 63 characters."""
    found = text.strip().lower()
    if len(found) > 63 or not SELECTOR.fullmatch(found):
        raise Invalid(
            f"bad selector {text!r}: DNS labels of letters, digits and hyphens, "
            "at most 63 characters"
        )
    return found


@dataclass(frozen=True)
class Pair:
    algorithm: str  # rsa-sha256 or ed25519-sha256
    private_pem: str  # PKCS #8, unencrypted
    public: str  # the record's p=: base64 of SubjectPublicKeyInfo (RSA) or the raw key (Ed25519)


def make_pair(kind: str, bits: int = 2048) -> Pair:
    """A new key pair of kind ("rsa" or "ed25519"); Invalid for any other kind or size."""
    if kind not in ALGORITHMS:
        raise Invalid(f"unknown algorithm {kind!r}: choose {' or '.join(ALGORITHMS)}")
    key: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    if kind == "rsa":
        if bits not in RSA_BITS:
            raise Invalid(f"RSA keys have {', '.join(map(str, RSA_BITS))} bits, not {bits}")
        key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    else:
        key = ed25519.Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return Pair(ALGORITHMS[kind], pem.decode("ascii"), base64.b64encode(public).decode("ascii"))


def record_name(key: DkimKey) -> str:
    return f"{key.selector}._domainkey.{key.domain}."


def record_value(key: DkimKey) -> str:
    """The TXT record's text: v=DKIM1; k=rsa or ed25519; p=the public key."""
    kind = key.algorithm.partition("-")[0]
    return f"v=DKIM1; k={kind}; p={key.public_key}"


def zone_line(key: DkimKey) -> str:
    """The record as a zone file line, its text split into strings of at most 255 octets."""
    value = record_value(key)
    strings = [value[i : i + TXT_STRING] for i in range(0, len(value), TXT_STRING)]
    return f"{record_name(key)} IN TXT ( " + " ".join(f'"{s}"' for s in strings) + " )"


def add(domain: str, selector: str, kind: str, bits: int, now: datetime) -> DkimKey:
    """A new key pair for domain and selector, stored; Invalid if the selector is taken."""
    domain, selector = signing_domain(domain), selector_of(selector)
    pair = make_pair(kind, bits)
    if find(domain, selector) is not None:
        raise Invalid(f"{domain} has a key with the selector {selector!r} already")
    key = DkimKey(domain=domain, selector=selector, algorithm=pair.algorithm,
                  private_key=pair.private_pem, public_key=pair.public, created_at=now)  # fmt: skip
    db.session.add(key)
    try:
        db.session.commit()
    except IntegrityError:  # added by another process since find()
        db.session.rollback()
        raise Invalid(f"{domain} has a key with the selector {selector!r} already") from None
    return key


def find(domain: str, selector: str) -> DkimKey | None:
    stmt = select(DkimKey).where(DkimKey.domain == domain, DkimKey.selector == selector)
    return db.session.scalars(stmt).one_or_none()


def remove(domain: str, selector: str) -> DkimKey:
    """Delete the key of domain and selector; Invalid if there is none."""
    domain, selector = signing_domain(domain), selector_of(selector)
    key = find(domain, selector)
    if key is None:
        raise Invalid(f"{domain} has no key with the selector {selector!r}")
    db.session.delete(key)
    db.session.commit()
    return key


def listed() -> list[DkimKey]:
    stmt = select(DkimKey).order_by(DkimKey.domain, DkimKey.selector)
    return list(db.session.scalars(stmt))
