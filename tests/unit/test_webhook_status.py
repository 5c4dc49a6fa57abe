"""The webhook delivery state machine and its guarded writer, without a database."""

import itertools

import pytest
from sqlalchemy import bindparam
from sqlalchemy.dialects import sqlite

from outbox.capabilities.webhooks.store import DELIVERIES, guarded
from outbox.core.webhook_status import MOVES, SETTLED, WebhookStatus, can_move, sources

PENDING, SENDING = WebhookStatus.PENDING, WebhookStatus.SENDING
DELIVERED, FAILED = WebhookStatus.DELIVERED, WebhookStatus.FAILED
ALLOWED = {
    (PENDING, SENDING),  # claimed
    (SENDING, PENDING),  # to be retried, or taken back from a dead worker
    (SENDING, DELIVERED),
    (SENDING, FAILED),  # its last retry
    (DELIVERED, PENDING),  # sent again by staff
    (FAILED, PENDING),
}


def test_the_table_holds_every_status_and_no_other_move():
    assert set(MOVES) == set(WebhookStatus)
    assert {(old, new) for old, news in MOVES.items() for new in news} == ALLOWED
    assert set(SETTLED) == {DELIVERED, FAILED}
    assert set(sources(PENDING)) == {SENDING, DELIVERED, FAILED}


def test_the_stored_values_are_those_the_api_shows():
    assert [s.value for s in WebhookStatus] == ["pending", "sending", "delivered", "failed"]


def _sql(stmt) -> str:  # type: ignore[no-untyped-def]
    return str(stmt.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))


@pytest.mark.parametrize("old, new", list(itertools.product(WebhookStatus, WebhookStatus)), ids=str)
def test_each_move_is_written_or_refused_as_the_table_says(old, new):
    assert can_move(old, new) == ((old, new) in ALLOWED)
    if (old, new) not in ALLOWED:
        with pytest.raises(ValueError, match="not in webhook_status.MOVES"):
            guarded(old, new, DELIVERIES.c.id == 1)
        return
    sql = _sql(guarded(old, new, DELIVERIES.c.id == 1, error=None))
    assert f"WHERE webhook_deliveries.status = '{old.value}'" in sql
    assert f"status='{new.value}'" in sql and "webhook_deliveries.id = 1" in sql


def test_several_old_statuses_are_named_in_the_guard():
    sql = _sql(guarded(SETTLED, PENDING, DELIVERIES.c.id == 1))
    assert "webhook_deliveries.status IN ('delivered', 'failed')" in sql


def test_several_new_statuses_come_with_the_expression_that_chooses():
    chosen = guarded(SENDING, (PENDING, DELIVERED, FAILED), status=bindparam("b_status"))
    assert "status=:b_status" in str(chosen)
    with pytest.raises(ValueError, match="expression that chooses"):
        guarded(SENDING, (PENDING, DELIVERED))
    with pytest.raises(ValueError, match="not in webhook_status.MOVES"):
        guarded(SENDING, (PENDING, SENDING), status=bindparam("b_status"))
