"""queue.direct, the API's single INSERT straight to the driver, held to a Core INSERT."""

from datetime import timedelta

import pytest
import sqlalchemy as sa

from outbox.models import Message, utcnow
from outbox.models.db import db
from outbox.queue import store
from tests.support.app import draft as make_draft

# The autocommit engine it runs on exists on database servers only.
pytestmark = pytest.mark.parametrize(
    "db_kind",
    [pytest.param("mariadb", marks=pytest.mark.mariadb),
     pytest.param("postgres", marks=pytest.mark.postgres)],
)  # fmt: skip


def fresh(message_id: int) -> Message:
    db.session.expire_all()
    return db.session.get(Message, message_id)


def test_the_direct_insert_stores_the_row_a_core_insert_stores(app):
    """queue.direct against SQLAlchemy's Core INSERT: every column read back the same."""
    draft = make_draft(from_addr="Ann Bé <ann@example.com>", to=["rcpt@example.com"],
                       cc=["Cé <c@bücher.example>"], text="hi €", html="<p>hi</p>",
                       headers={"X-Tag": "é"}, priority=-3,
                       send_after=utcnow() + timedelta(minutes=5))  # fmt: skip
    row = store.message_row(draft, utcnow(), source="test", max_attempts=3,
                             idempotency_key="k1", request_hash="h")  # fmt: skip
    engine = db.engines[store.AUTOCOMMIT]
    direct = store.direct.insert_row(engine, store.MESSAGES, row)
    twin = {**row, "message_id": row["message_id"].replace("<", "<t"), "idempotency_key": "k2"}
    with engine.connect() as conn:
        core = conn.execute(store.INSERT_MESSAGE, twin).inserted_primary_key[0]
    table = store.MESSAGES
    columns = [c for c in table.c if c.name not in ("id", "message_id", "idempotency_key")]
    query = sa.select(table.c.id, *columns).where(table.c.id.in_([direct, core]))
    stored = {pk: tuple(r) for pk, *r in db.session.execute(query)}
    assert stored[direct] == stored[core]
    assert fresh(direct).recipients == row["recipients"]


def test_a_direct_insert_that_breaks_a_constraint_raises_sqlalchemys_error(app):
    draft = make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text="hi")
    row = store.message_row(draft, utcnow(), source="test", max_attempts=3)
    store.direct.insert_row(db.engines[store.AUTOCOMMIT], store.MESSAGES, row)
    with pytest.raises(sa.exc.IntegrityError):  # the same Message-ID again
        store.direct.insert_row(db.engines[store.AUTOCOMMIT], store.MESSAGES, row)


def test_a_direct_insert_that_cannot_connect_raises_sqlalchemys_error(app):
    """Engine.raw_connection raises the driver's error; the API answers 503 for SQLAlchemy's."""
    draft = make_draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text="hi")
    row = store.message_row(draft, utcnow(), source="test", max_attempts=3)
    nowhere = sa.create_engine(db.engine.url.set(host="127.0.0.1", port=1))
    try:
        with pytest.raises(sa.exc.OperationalError):
            store.direct.insert_row(nowhere, store.MESSAGES, row)
    finally:
        nowhere.dispose()
