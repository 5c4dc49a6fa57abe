"""API tokens: the cache of live tokens that spares most requests a token SELECT."""

import pytest
import sqlalchemy as sa

from outbox import create_app
from outbox.auth import tokens
from outbox.models import ApiToken, utcnow
from outbox.models.db import db
from tests.support.app import base_config


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def revoke_elsewhere(name: str) -> None:
    """Revoke as another process would (the CLI): this process's cache is not told."""
    db.session.execute(sa.update(ApiToken).where(ApiToken.name == name).values(revoked_at=utcnow()))
    db.session.commit()


def selects(app) -> list[str]:  # type: ignore[no-untyped-def]
    """A list that fills with every statement the app's engine runs from now on."""
    seen: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def test_a_revoked_token_works_until_its_entry_runs_out_then_never(app):
    clock = Clock()
    cache = tokens.Cache(5.0, clock)
    token = tokens.create("shop")
    assert cache.name(token) == "shop"
    revoke_elsewhere("shop")
    clock.now += 4.9
    assert cache.name(token) == "shop"  # the documented delay
    clock.now += 0.2
    assert cache.name(token) is None
    clock.now += 60
    assert cache.name(token) is None


def test_a_cached_token_is_not_asked_for_again_within_the_time(app):
    clock = Clock()
    cache = tokens.Cache(5.0, clock)
    token = tokens.create("shop")
    seen = selects(app)
    assert cache.name(token) == "shop"
    clock.now += 4
    assert cache.name(token) == "shop"
    assert len(seen) == 1
    clock.now += 2
    assert cache.name(token) == "shop"
    assert len(seen) == 2


def test_an_unknown_token_is_asked_for_every_time_and_never_taken(app):
    clock = Clock()
    cache = tokens.Cache(5.0, clock)
    live = tokens.create("shop")
    assert cache.name(live) == "shop"
    seen = selects(app)
    for guess in ["obx_wrong", live + "x", live[:-1], live.upper(), ""]:
        assert cache.name(guess) is None
        assert cache.name(guess) is None
    assert len(seen) == 10
    assert cache._names.keys() == {tokens.digest(live)}


def test_a_token_made_after_a_miss_works_at_once(app):
    cache = tokens.Cache(5.0, Clock())
    assert cache.name("obx_not_yet") is None
    db.session.add(ApiToken(name="late", token_hash=tokens.digest("obx_not_yet"),
                            created_at=utcnow()))  # fmt: skip
    db.session.commit()
    assert cache.name("obx_not_yet") == "late"


def test_zero_seconds_asks_every_time(app):
    cache = tokens.Cache(0, Clock())
    token = tokens.create("shop")
    assert cache.name(token) == "shop"
    revoke_elsewhere("shop")
    assert cache.name(token) is None


def test_revoking_in_this_process_ends_the_token_here_at_once(app, client):
    token = tokens.create("shop")
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/messages/1", headers=headers).status_code == 404
    assert tokens.revoke("shop")
    assert client.get("/api/messages/1", headers=headers).status_code == 401


def test_the_api_keeps_a_token_revoked_elsewhere_for_the_cache_time(app, client):
    clock = Clock()
    app.extensions[tokens.CACHE] = tokens.Cache(app.config["TOKEN_CACHE_SECONDS"], clock)
    token = tokens.create("shop")
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/messages/1", headers=headers).status_code == 404
    revoke_elsewhere("shop")
    assert client.get("/api/messages/1", headers=headers).status_code == 404
    clock.now += app.config["TOKEN_CACHE_SECONDS"]
    assert client.get("/api/messages/1", headers=headers).status_code == 401


def test_token_cache_seconds_is_a_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    monkeypatch.setenv("OUTBOX_TOKEN_CACHE_SECONDS", "0.5")
    app = create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}"))
    assert app.extensions[tokens.CACHE].seconds == 0.5
    with pytest.raises(ValueError, match="TOKEN_CACHE_SECONDS"):
        create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}", TOKEN_CACHE_SECONDS=-1))
