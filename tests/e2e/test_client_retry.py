"""A send retried after a lost answer or a 503 is queued once (served API, each database)."""

import threading
import time

import pytest
import sqlalchemy as sa

from outbox.auth import tokens
from outbox.client import Client, Email, Unavailable
from outbox.models import Message
from outbox.models.db import db
from tests.support.client_served import Proxy, serve

SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb),
           pytest.param("postgres", marks=pytest.mark.postgres)]  # fmt: skip


def _stored() -> list[int]:
    db.session.commit()
    return list(db.session.scalars(sa.select(Message.id).order_by(Message.id)))


@pytest.fixture
def proxy(served):  # type: ignore[no-untyped-def]  # noqa: F811
    found = Proxy(served.port)
    yield found
    found.close()


@pytest.mark.all_databases
def test_a_send_whose_answer_was_lost_is_retried_under_its_key_and_queued_once(proxy, app):
    with Client(f"http://127.0.0.1:{proxy.port}", tokens.create("c"), backoff=0.05) as client:
        proxy.drop_answers = 1
        sent = client.send(to="a@example.com", subject="once", text="x")
        assert proxy.dropped == 1  # the first answer, 201, never reached the client
        assert _stored() == [sent.id]
        proxy.drop_answers = 1
        queued = client.send_batch([Email(to=f"b{n}@example.com", text="x") for n in range(3)])
        assert proxy.dropped == 2
    assert _stored() == [sent.id, *(q.id for q in queued)]


def test_without_a_retry_left_a_lost_answer_is_unavailable_and_the_key_tells_the_rest(proxy, app):
    """The caller who sends again under the same key learns the message was queued."""
    with Client(f"http://127.0.0.1:{proxy.port}", tokens.create("c"), retries=0) as client:
        proxy.drop_answers = 1
        with pytest.raises(Unavailable, match="could not be reached") as caught:
            client.send(to="a@example.com", text="x")
        key = caught.value.idempotency_key
        assert key is not None
        again = client.send(to="a@example.com", text="x", idempotency_key=key)
    assert _stored() == [again.id]


@pytest.mark.parametrize("db_kind", SERVERS, indirect=True)
def test_a_database_outage_answers_503_and_the_retry_queues_once(app, database_url, tmp_path):
    """The served API's database goes away (a proxy cut): 503s, then the retry is queued."""
    url = sa.engine.make_url(database_url)
    database = Proxy(url.port or 0)
    through = url.set(port=database.port).render_as_string(hide_password=False)
    try:
        with serve(through, tmp_path) as served:  # noqa: F811
            token = tokens.create("c")
            database.refuse = True
            database.cut()
            restore = threading.Thread(target=_restore_after_refusals, args=(database,))
            restore.start()
            with Client(served.url, token, retries=8, backoff=0.2, max_backoff=1) as client:
                sent = client.send(to="a@example.com", text="x")
            restore.join()
            log = served.log.read_text()
    finally:
        database.close()
    assert "database unavailable" in log  # the server answered 503 at least once
    assert _stored() == [sent.id]


def _restore_after_refusals(database: Proxy) -> None:
    """Let the database back once the server has tried it and been refused twice."""
    deadline = time.monotonic() + 30
    while database.refused < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    database.refuse = False
