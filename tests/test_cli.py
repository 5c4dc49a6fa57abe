"""The outbox commands: schema upgrade, tokens, one drain pass."""

import pytest
import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app, queue, reports, rollups, tokens
from outbox.extensions import Base, db, dispose_engines
from outbox.models import ApiToken, utcnow

from .conftest import base_config


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
