"""outbox.client names a message's stream, against the API served for real."""

import pytest
import sqlalchemy as sa

from outbox.auth import tokens
from outbox.client import Client, Email, FieldErrors
from outbox.models import Message
from outbox.models.db import db


@pytest.fixture
def client(served):  # type: ignore[no-untyped-def]
    with Client(served.url, tokens.create("client"), retries=2, backoff=0.05) as found:
        yield found


def stored() -> list[str]:
    found = list(db.session.scalars(sa.select(Message.stream).order_by(Message.id)))
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_the_client_sends_the_stream_and_reads_it_back(client):
    news = client.send(to="a@example.com", text="x", stream="broadcast")
    reset = client.send(to="a@example.com", text="x")
    client.send_batch([Email(to="b@example.com", text="y", stream="broadcast")])
    assert (news.stream, reset.stream) == ("broadcast", "transactional")
    assert stored() == ["broadcast", "transactional", "broadcast"]
    listed = client.list(stream="broadcast").messages
    assert [m.id for m in listed][-1] == news.id and {m.stream for m in listed} == {"broadcast"}


def test_an_unknown_stream_is_a_field_error(client):
    with pytest.raises(FieldErrors) as caught:
        client.send(to="a@example.com", text="x", stream="bulk")
    assert list(caught.value.fields) == ["stream"]
    assert stored() == []
