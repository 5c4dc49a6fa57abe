"""API tokens: made at random, shown once, stored only as a SHA-256 digest."""

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import cast

from flask import current_app
from sqlalchemy import ColumnElement, Row, select

from outbox.auth import audit
from outbox.core.roles import SCOPES
from outbox.models import ApiToken, utcnow
from outbox.models.db import db

PREFIX = "obx_"
CACHE = "outbox.tokens"  # the key of the app's Cache in app.extensions


def digest(token: str) -> str:
    """The stored form of a token.

    A plain SHA-256 is enough: the tokens are 256 random bits, so there is no
    dictionary to guard against, and the check stays cheap on every request.
    """
    return hashlib.sha256(token.encode()).hexdigest()


def create(name: str, scopes: tuple[str, ...] | list[str] = SCOPES) -> str:
    """Make a token with these scopes under a name and return it; no live one may have the name."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise ValueError(f"scopes must be some of {', '.join(SCOPES)}; not {', '.join(unknown)}")
    token = PREFIX + secrets.token_urlsafe(32)
    row = db.session.execute(select(ApiToken).where(ApiToken.name == name)).scalar_one_or_none()
    if row is not None and row.revoked_at is None:
        raise ValueError(f"a live token named {name!r} exists; revoke it first")
    if row is None:
        row = ApiToken(name=name)
        db.session.add(row)
    row.token_hash, row.revoked_at, row.created_at = digest(token), None, utcnow()
    row.scopes = " ".join(s for s in SCOPES if s in scopes)
    db.session.commit()
    audit.record("create_token", detail={"name": name, "scopes": row.scopes})
    return token


def revoke(name: str) -> bool:
    """Revoke the live token of that name; False if there is none.

    It ends at once in this process; other processes' caches may take it for up to
    their TOKEN_CACHE_SECONDS more.
    """
    row = db.session.execute(select(ApiToken).where(ApiToken.name == name)).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    db.session.commit()
    audit.record("revoke_token", detail={"name": name})
    cache().forget(row.token_hash)
    return True


def lookup(token: str) -> Row[str] | None:
    """The name of the live token presented, as row.name, or None.

    Only the name is read: this runs before every API request.
    """
    return db.session.execute(select(ApiToken.name).where(*_live(digest(token)))).one_or_none()


def _live(key: str) -> tuple[ColumnElement[bool], ...]:
    return ApiToken.token_hash == key, ApiToken.revoked_at.is_(None)


def cache() -> "Cache":
    """The app's token cache, made by create_app."""
    return cast(Cache, current_app.extensions[CACHE])


class Cache:
    """Live tokens seen lately, so most API requests need no token SELECT.

    Only tokens found live are kept, each for `seconds`: a revoked token keeps working
    in this process until its entry runs out, and an unknown token is asked for every
    time. 0 seconds turns the cache off.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        # digest -> (name, scopes, good until)
        self._names: dict[str, tuple[str, frozenset[str], float]] = {}

    def name(self, token: str) -> str | None:
        """The name of the live token presented, or None."""
        found = self.find(token)
        return found[0] if found else None

    def find(self, token: str) -> tuple[str, frozenset[str]] | None:
        """The name and scopes of the live token presented, or None."""
        key = digest(token)
        now = self.clock()
        cached = self._names.get(key)
        if cached is not None and now < cached[2]:
            return cached[0], cached[1]
        live = select(ApiToken.name, ApiToken.scopes).where(*_live(key))
        row = db.session.execute(live).one_or_none()
        if row is None:
            self._names.pop(key, None)
            return None
        scopes = frozenset(row.scopes.split())
        if self.seconds > 0:
            self._names[key] = (row.name, scopes, now + self.seconds)
        return row.name, scopes

    def forget(self, key: str) -> None:
        """Drop the entry of a token digest, if there is one."""
        self._names.pop(key, None)
