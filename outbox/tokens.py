"""API tokens: made at random, shown once, stored only as a SHA-256 digest."""

import hashlib
import secrets

from sqlalchemy import Row, select

from .extensions import db
from .models import ApiToken, utcnow

PREFIX = "obx_"


def digest(token: str) -> str:
    """The stored form of a token.

    A plain SHA-256 is enough: the tokens are 256 random bits, so there is no
    dictionary to guard against, and the check stays cheap on every request.
    """
    return hashlib.sha256(token.encode()).hexdigest()


def create(name: str) -> str:
    """Make a token under a name and return it; the name must not have a live one."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = db.session.execute(select(ApiToken).where(ApiToken.name == name)).scalar_one_or_none()
    if row is not None and row.revoked_at is None:
        raise ValueError(f"a live token named {name!r} exists; revoke it first")
    if row is None:
        row = ApiToken(name=name)
        db.session.add(row)
    row.token_hash, row.revoked_at, row.created_at = digest(token), None, utcnow()
    db.session.commit()
    return token


def revoke(name: str) -> bool:
    """Revoke the live token of that name; False if there is none."""
    row = db.session.execute(select(ApiToken).where(ApiToken.name == name)).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    db.session.commit()
    return True


def lookup(token: str) -> Row[str] | None:
    """The name of the live token presented, as row.name, or None.

    Only the name is read: this runs before every API request.
    """
    live = (ApiToken.token_hash == digest(token), ApiToken.revoked_at.is_(None))
    return db.session.execute(select(ApiToken.name).where(*live)).one_or_none()
