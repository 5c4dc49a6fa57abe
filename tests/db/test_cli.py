"""The outbox commands: schema upgrade, tokens, one drain pass."""

from datetime import timedelta

import pytest
import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app, queue
from outbox.auth import accounts, tokens
from outbox.models import ApiToken, utcnow
from outbox.models.db import Base, db, dispose_engines
from outbox.ops import reports, rollups
from tests.support.app import base_config


@pytest.mark.all_databases
def test_upgrade_makes_every_table_of_the_models_in_an_empty_database(empty_database_url):
    with create_app(base_config(empty_database_url)).app_context():
        try:
            upgrade()
            tables = set(sa.inspect(db.engine).get_table_names())
        finally:
            dispose_engines()
    assert tables == {table.name for table in Base.metadata.sorted_tables} | {"alembic_version"}


@pytest.mark.all_databases
def test_db_upgrade_is_idempotent(app, runner):
    result = runner.invoke(args=["db", "upgrade"])
    assert result.exit_code == 0, result.output
    upgrade()
    tables = set(sa.inspect(db.engine).get_table_names())
    assert {"messages", "attachments", "attachment_chunks", "attempts", "api_tokens"} <= tables


def test_create_token_prints_it_last_and_stores_only_a_digest(app, runner):
    result = runner.invoke(args=["create-token", "shop"])
    assert result.exit_code == 0, result.output
    token = result.output.strip().splitlines()[-1]
    assert token.startswith("obx_") and len(token) > 40
    row = db.session.execute(sa.select(ApiToken)).scalar_one()
    assert row.token_hash == tokens.digest(token) and token not in row.token_hash
    assert tokens.cache().name(token) == "shop"


def test_a_live_token_name_cannot_be_reused(app, runner):
    runner.invoke(args=["create-token", "shop"])
    result = runner.invoke(args=["create-token", "shop"])
    assert result.exit_code != 0
    assert "revoke it first" in result.output


def test_revoke_token_ends_it_and_frees_the_name(app, runner):
    old = runner.invoke(args=["create-token", "shop"]).output.strip().splitlines()[-1]
    result = runner.invoke(args=["revoke-token", "shop"])
    assert result.exit_code == 0 and "revoked" in result.output
    assert tokens.cache().name(old) is None
    new = runner.invoke(args=["create-token", "shop"]).output.strip().splitlines()[-1]
    assert tokens.cache().name(new) == "shop" and tokens.cache().name(old) is None


def test_revoking_an_unknown_token_is_an_error(app, runner):
    result = runner.invoke(args=["revoke-token", "nobody"])
    assert result.exit_code != 0
    assert "no live token named 'nobody'" in result.output


@pytest.mark.all_databases
def test_the_migrations_match_the_models(app, runner):
    result = runner.invoke(args=["db", "check"])
    assert result.exit_code == 0, result.output


def test_send_queued_makes_the_full_counts_when_they_are_due(app, runner, make_message):
    queue.cancel(make_message().id)  # nothing to send
    result = runner.invoke(args=["send-queued"])
    assert result.exit_code == 0, result.output
    counted = reports.status_counts(cap=0)["cancelled"]
    assert counted.value == 1 and counted.counted_at is not None
    assert not rollups.counts_due(utcnow())


def _fail(times: int, address: str, email: str = "staff@example.com") -> None:
    """Wrong passwords from address, a second apart, ending now."""
    start = utcnow() - timedelta(seconds=times)
    for n in range(times):
        moment = start + timedelta(seconds=n)
        assert accounts.sign_in(email, "wrong horse", address, now=moment) is None


def _locked(address: str) -> bool:
    try:
        accounts.sign_in("staff@example.com", "correct horse", address)
    except accounts.TooManyFailures:
        return True
    return False


@pytest.mark.all_databases
def test_unlock_lifts_one_address_and_leaves_the_others_locked(app, runner, staff):
    _fail(5, "192.0.2.1")
    _fail(5, "192.0.2.2")
    result = runner.invoke(args=["unlock", "192.0.2.1"])
    assert result.exit_code == 0, result.output
    assert result.output == "lifted the lockout of 192.0.2.1 (5 failed sign-ins in the last " \
                            "15 minutes)\n"  # fmt: skip
    assert not _locked("192.0.2.1") and _locked("192.0.2.2")
    assert accounts.lockouts() == {"192.0.2.2": 5}


def test_unlock_says_when_an_address_was_not_locked(app, runner, staff):
    _fail(2, "192.0.2.1")
    result = runner.invoke(args=["unlock", "192.0.2.1"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("nothing to lift: 192.0.2.1 was not locked out (2 failed")
    _fail(4, "192.0.2.1")  # the two are forgotten: four more do not lock it
    assert not _locked("192.0.2.1")
    result = runner.invoke(args=["unlock", "192.0.2.3"])
    assert result.output == "nothing to lift: no failed sign-ins from 192.0.2.3 in the last " \
                            "15 minutes\n"  # fmt: skip


def test_unlock_finds_an_ipv6_address_however_the_proxy_spelled_it(app, runner, staff):
    _fail(5, "2001:DB8:0:0::1")
    assert _locked("2001:DB8:0:0::1")
    result = runner.invoke(args=["unlock", "2001:db8::1"])
    assert "lifted the lockout of 2001:db8::1 (5 failed" in result.output
    assert not _locked("2001:DB8:0:0::1")


@pytest.mark.all_databases
def test_unlock_by_email_lifts_the_lockouts_of_the_addresses_that_tried_that_account(
    app, runner, staff
):
    _fail(5, "192.0.2.1")
    _fail(4, "2001:db8::7", email="nobody@example.com")
    _fail(1, "2001:db8::7", email="Staff@Example.COM")  # one try at staff's account, typed oddly
    _fail(5, "192.0.2.66", email="ceo@example.com")  # a guesser after someone else: stays locked
    _fail(3, "192.0.2.9")  # not locked: left as it is
    result = runner.invoke(args=["unlock", "staff@EXAMPLE.com"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "lifted the lockout of 192.0.2.1 (5 failed sign-ins in the last 15 minutes)",
        "lifted the lockout of 2001:db8::/64 (5 failed sign-ins in the last 15 minutes)",
    ]
    assert accounts.lockouts() == {"192.0.2.66": 5}
    assert not _locked("192.0.2.1") and not _locked("2001:db8::7") and _locked("192.0.2.66")
    result = runner.invoke(args=["unlock", "staff@example.com"])
    assert result.output == (
        "nothing to lift: staff@example.com is not locked out, nor any address that tried it\n"
    )


@pytest.mark.parametrize(
    ("who", "error"),
    [("ghost@example.com", "no account for ghost@example.com"),
     ("192.0.2", "'192.0.2' is neither an email address nor an IP address"),
     ("staff", "'staff' is neither")],
)  # fmt: skip
def test_unlock_refuses_what_it_cannot_find_and_changes_nothing(app, runner, staff, who, error):
    _fail(5, "192.0.2.1")
    result = runner.invoke(args=["unlock", who])
    assert result.exit_code == 1
    assert error in result.output
    assert accounts.lockouts() == {"192.0.2.1": 5}


def test_unlock_help_is_its_docstring(app, runner):
    result = runner.invoke(args=["unlock", "--help"])
    assert result.exit_code == 0
    assert "Usage: outbox unlock [OPTIONS] EMAIL-or-ADDRESS" in result.output
    assert "Five failed sign-ins from one address within 15 minutes" in result.output
