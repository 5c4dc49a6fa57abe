"""The keys a process signs with: read from the database once, and again every DKIM_REFRESH seconds.

No query per mail: a worker looks keys up in memory, and a key added or removed while
it runs is used or dropped within DKIM_REFRESH seconds, without a restart.
"""

import logging
import threading
import time

from cryptography.hazmat.primitives import serialization
from flask import current_app, has_app_context
from sqlalchemy import select

from outbox.core.addresses import a_label
from outbox.mail.signing import PrivateKey, Signer
from outbox.models.db import db
from outbox.models.dkim import DkimKey

log = logging.getLogger(__name__)
# Signatures go in this order of algorithm: verifiers that check only the first one
# (dkimpy's verify() does) find RSA, which every verifier knows (RFC 8463 suggests
# signing with both while Ed25519 is not known everywhere).
ORDER = {"rsa-sha256": 0, "ed25519-sha256": 1}


class Keyring:
    """Every stored key by domain, as Signers, reloaded when older than refresh seconds."""

    def __init__(self, refresh: float) -> None:
        self.refresh = refresh
        self.loaded_at: float | None = None
        self.by_domain: dict[str, tuple[Signer, ...]] = {}
        self.lock = threading.Lock()

    def signers(self, domain: str, now: float) -> tuple[Signer, ...]:
        """The keys for a mail From domain (A-labels): its own, else the nearest parent's.

        Relaxed DMARC alignment passes with a signature of an organizational domain
        for mail from its subdomains. Every key of that domain signs: one RSA and one
        Ed25519 key give two signatures, and during a rotation old and new selector both.
        """
        if self.loaded_at is None or now - self.loaded_at >= self.refresh:
            self._reload(now)
        labels = domain.lower().split(".")
        for start in range(len(labels)):
            found = self.by_domain.get(".".join(labels[start:]))
            if found:
                return found
        return ()

    def _reload(self, now: float) -> None:
        with self.lock:
            if self.loaded_at is not None and now - self.loaded_at < self.refresh:
                return  # another thread just did
            try:
                self.by_domain = _read()
            except Exception:
                if self.loaded_at is None:
                    raise  # nothing to sign with yet: the mail must not go unsigned
                log.exception("could not reread the DKIM keys; signing with those read before")
            self.loaded_at = now


def _read() -> dict[str, tuple[Signer, ...]]:
    """Every stored key, on a connection of its own (the caller's transaction is left alone)."""
    with db.engine.connect() as conn:
        stmt = select(DkimKey.domain, DkimKey.selector, DkimKey.algorithm, DkimKey.private_key)
        rows = conn.execute(stmt.order_by(DkimKey.created_at.desc())).all()
    found: dict[str, list[Signer]] = {}
    for domain, selector, algorithm, pem in rows:
        try:
            private = serialization.load_pem_private_key(pem.encode(), None)
        except ValueError as exc:
            log.error("DKIM key %s of %s cannot be read, not signing with it: %s",
                      selector, domain, exc)  # fmt: skip
            continue
        assert isinstance(private, PrivateKey)
        found.setdefault(domain, []).append(
            Signer(domain.encode(), selector.encode(), algorithm.encode(), private)
        )
    return {
        domain: tuple(sorted(signers, key=lambda s: ORDER.get(s.algorithm.decode(), 2)))
        for domain, signers in found.items()
    }


def signers_for(address: str) -> tuple[Signer, ...]:
    """The keys that sign mail from address, from the app's keyring; none outside an app."""
    if not has_app_context():
        return ()
    ring = current_app.extensions.get("dkim")
    if ring is None:
        ring = current_app.extensions["dkim"] = Keyring(current_app.config["DKIM_REFRESH"])
    return ring.signers(a_label(address.rpartition("@")[2]), time.monotonic())
