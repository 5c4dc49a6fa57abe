"""The DKIM signing keys: a key pair per domain and selector."""

from datetime import datetime

from sqlalchemy import String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from outbox.models.db import Base
from outbox.models.types import Id, Timestamp, utcnow


class DkimKey(Base):
    """A key pair that signs mail from its domain (and its subdomains without keys of their own).

    The private key is kept as PEM (PKCS #8) in the database, where every worker reads it:
    whoever can read this table can sign mail as the domain.
    """

    __tablename__ = "dkim_keys"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    domain: Mapped[str] = mapped_column(String(253))  # IDNA2008 A-labels, lower case
    selector: Mapped[str] = mapped_column(String(63))  # lower case; s=, and <selector>._domainkey
    algorithm: Mapped[str] = mapped_column(String(16))  # rsa-sha256 or ed25519-sha256
    private_key: Mapped[str] = mapped_column(Text)  # PEM, PKCS #8, unencrypted
    public_key: Mapped[str] = mapped_column(Text)  # the p= of the DNS record (base64)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)

    __table_args__ = (UniqueConstraint("domain", "selector", name="uq_dkim_keys_selector"),)
