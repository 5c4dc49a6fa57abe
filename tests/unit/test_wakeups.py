"""queue.wakeups and queue.direct's NOTIFY, the parts that need no database."""

from datetime import timedelta

import pytest
from sqlalchemy.dialects import mysql, postgresql

from outbox.models import utcnow
from outbox.queue import direct, inserts, wakeups


def test_only_rows_claimable_now_are_due():
    now = utcnow()
    queued = {"status": "queued", "next_attempt_at": now - timedelta(seconds=1)}
    assert wakeups.any_due([queued])
    assert not wakeups.any_due([{**queued, "next_attempt_at": now + timedelta(minutes=5)}])
    assert not wakeups.any_due([{**queued, "status": "held"}])
    assert not wakeups.any_due([])
    later = {**queued, "next_attempt_at": now + timedelta(minutes=5)}
    assert wakeups.any_due([later, later, queued])


def test_the_direct_insert_notifies_in_the_same_statement_on_postgresql():
    columns = ("message_id", "subject")
    plain = direct.compiled(inserts.MESSAGES, postgresql.psycopg.dialect(), columns)
    told = direct.compiled(inserts.MESSAGES, postgresql.psycopg.dialect(), columns, "outbox_due")
    assert told.sql == (
        f"WITH new AS ({plain.sql}) SELECT id, pg_notify('outbox_due', '') FROM new"
    )
    assert told.returning and told.positions == plain.positions


def test_a_database_without_notify_is_refused_one():
    with pytest.raises(ValueError, match="mysql has no NOTIFY"):
        direct.compiled(inserts.MESSAGES, mysql.pymysql.dialect(), ("subject",), "outbox_due")


def test_a_probe_wakes_on_a_new_message_or_a_new_staff_move_only():
    seen = wakeups.Mark(newest_id=10, moves=3)
    assert wakeups.Mark(11, 3).grew(seen)
    assert wakeups.Mark(10, 4).grew(seen)
    assert not wakeups.Mark(10, 3).grew(seen)
    assert not wakeups.Mark(9, 3).grew(seen)  # the newest message purged: nothing new
    assert wakeups.Mark(9, 4).grew(seen)
