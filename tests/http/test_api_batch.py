"""POST /api/messages/batch: all of a batch or none of it; what it stores, on each database."""

import base64
from datetime import datetime

import pytest
import sqlalchemy as sa

from outbox import create_app, queue
from outbox.auth import tokens
from outbox.core.checks import Upload
from outbox.core.status import Status
from outbox.models import Message
from outbox.models.db import db, dispose_engines
from outbox.queue import attachments, store
from outbox.worker import Tally, Worker
from tests.support.api import BATCH, MESSAGES, VALID, auth, nothing_stored, post, stored
from tests.support.app import base_config


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def batch(client, token: str, messages: object, key: str | None = None):
    return client.post(BATCH, json={"messages": messages}, headers=auth(token, key))


def numbered(count: int, **fields: object) -> list[dict[str, object]]:
    """count valid messages, each with its number in the subject and the recipient."""
    return [{"to": f"rcpt{n}@example.com", "subject": f"message {n}", "text": f"body {n}",
             **fields} for n in range(count)]  # fmt: skip


def rows_by_id(ids: list[int]) -> dict[int, Message]:
    db.session.expire_all()
    found = db.session.scalars(sa.select(Message).where(Message.id.in_(ids)))
    return {m.id: m for m in found}


@pytest.mark.all_databases
def test_batch_is_stored_whole_and_answered_in_request_order(client, token):
    messages = numbered(4)
    messages[1].update({"from": "Shop <shop@example.com>", "cc": ["cc@example.com"],
                        "priority": 7, "send_after": "2030-01-02T03:04:05+02:00",
                        "headers": {"X-Campaign": "spring"}, "html": "<p>Rich</p>"})  # fmt: skip
    messages[2]["to"] = ["Ann <ann@example.com>", "bob@example.com"]
    response = batch(client, token, messages)
    assert response.status_code == 201
    answered = response.get_json()["messages"]
    assert len(answered) == 4 and "Idempotent-Replayed" not in response.headers
    ids = [a["id"] for a in answered]
    assert len(set(ids)) == 4
    rows = rows_by_id(ids)
    for n, found in enumerate(answered):
        row = rows[found["id"]]
        assert (row.subject, row.message_id) == (f"message {n}", found["message_id"])
        assert (row.status, row.attempts, row.max_attempts) == (Status.QUEUED, 0, 3)
        assert row.source == "api:shop"
    second = rows[ids[1]]
    assert (str(second.sender), second.listed("cc"), second.priority) == (
        "Shop <shop@example.com>", "cc@example.com", 7)  # fmt: skip
    assert second.send_after == second.next_attempt_at == datetime(2030, 1, 2, 1, 4, 5)
    assert (second.headers, second.html_body) == ({"X-Campaign": "spring"}, "<p>Rich</p>")
    assert rows[ids[0]].from_addr == "outbox@example.com"
    assert rows[ids[2]].listed("to") == "Ann <ann@example.com>, bob@example.com"
    assert stored() == {"messages": 4, "attachments": 0, "attachment_chunks": 0}
    shown = client.get(f"{MESSAGES}/{ids[3]}", headers=auth(token)).get_json()
    assert shown["subject"] == "message 3"


@pytest.mark.all_databases
def test_a_thousand_messages_go_in_several_inserts_in_order(client, token, monkeypatch):
    monkeypatch.setattr(store, "INSERT_ROWS", 300)
    response = batch(client, token, numbered(1000))
    assert response.status_code == 201
    answered = response.get_json()["messages"]
    rows = rows_by_id([a["id"] for a in answered])
    assert len(rows) == 1000
    assert all(rows[a["id"]].subject == f"message {n}" for n, a in enumerate(answered))
    assert all(rows[a["id"]].message_id == a["message_id"] for a in answered)


@pytest.mark.all_databases
def test_inserts_are_split_by_the_bytes_they_carry(client, token, monkeypatch):
    monkeypatch.setattr(store, "INSERT_BYTES", 5000)
    messages = numbered(7)
    for n in (1, 4, 5):
        messages[n]["text"] = f"{n}" * 3000
    response = batch(client, token, messages)
    assert response.status_code == 201
    rows = rows_by_id([a["id"] for a in response.get_json()["messages"]])
    texts = [rows[a["id"]].text_body for a in response.get_json()["messages"]]
    assert texts == [m["text"] for m in messages]


@pytest.mark.all_databases
def test_without_insert_returning_the_ids_are_found_by_message_id(client, token, monkeypatch):
    """The path MySQL takes, which has no INSERT ... RETURNING."""
    monkeypatch.setattr(db.engine.dialect, "insert_executemany_returning", False)
    response = batch(client, token, numbered(5))
    assert response.status_code == 201
    answered = response.get_json()["messages"]
    rows = rows_by_id([a["id"] for a in answered])
    assert [rows[a["id"]].message_id for a in answered] == [a["message_id"] for a in answered]
    assert [rows[a["id"]].subject for a in answered] == [f"message {n}" for n in range(5)]


def test_one_bad_message_refuses_the_whole_batch(client, token):
    messages = numbered(5)
    messages[1]["to"] = "not an address"
    messages[3].update({"subject": "Hi\r\nBcc: victim@example.com", "priority": "high"})
    response = batch(client, token, messages)
    assert response.status_code == 422
    answer = response.get_json()
    assert "no message" in answer["error"]
    assert sorted((e["index"], e["field"]) for e in answer["errors"]) == [
        (1, "to"), (3, "priority"), (3, "subject")]  # fmt: skip
    assert all(e["error"] for e in answer["errors"])
    assert nothing_stored()


INJECTIONS = [
    {"to": ["rcpt@example.com\r\nBcc: victim@example.com"]},
    {"cc": "cc@example.com\nBcc: victim@example.com"},
    {"from": "outbox@example.com\r\nBcc: victim@example.com"},
    {"reply_to": "help@example.com\nBcc: victim@example.com"},
    {"subject": "Hi\u2028Bcc: victim@example.com"},
    {"headers": {"X-Tag": "a\r\nBcc: victim@example.com"}},
    {"headers": {"Bcc": "victim@example.com"}},
    {"attachments": [{"filename": "a\r\nBcc: v.txt", "content": "aGk="}]},
]


@pytest.mark.parametrize("change", INJECTIONS)
def test_header_injection_anywhere_refuses_the_batch(client, token, change):
    messages = numbered(3)
    messages[2].update(change)
    response = batch(client, token, messages)
    assert response.status_code == 422
    assert [(e["index"], e["field"]) for e in response.get_json()["errors"]] == [
        (2, next(iter(change)))
    ]
    assert nothing_stored()


def test_more_than_a_thousand_messages_is_413_naming_the_limit(client, token):
    response = batch(client, token, numbered(1001))
    assert response.status_code == 413
    assert "1000" in response.get_json()["error"]
    assert response.get_json()["errors"][0]["field"] == "messages"
    assert nothing_stored()


def test_an_empty_batch_is_422(client, token):
    response = batch(client, token, [])
    assert response.status_code == 422
    assert "1 to 1000" in response.get_json()["error"]
    assert nothing_stored()


@pytest.mark.parametrize(
    "data, content_type",
    [("[1, 2]", "application/json"), ('{"messages": ', "application/json"),
     ("{}", "application/json"), ('{"messages": {"to": "a@example.com"}}', "application/json"),
     ('{"messages": "a@example.com"}', "application/json"), ("null", "application/json"),
     ("[" * 100_000 + "]" * 100_000, "application/json")],
)  # fmt: skip
def test_a_body_that_is_not_a_messages_object_is_400(client, token, data, content_type):
    response = client.post(BATCH, data=data, content_type=content_type, headers=auth(token))
    assert response.status_code == 400
    (problem,) = response.get_json()["errors"]
    assert problem["field"] == "body" and "messages" in problem["error"]
    assert nothing_stored()


def test_messages_that_are_not_objects_are_named_by_index(client, token):
    response = batch(client, token, [VALID, 5, "rcpt@example.com", [VALID], None])
    assert response.status_code == 422
    errors = response.get_json()["errors"]
    assert [(e["index"], e["field"]) for e in errors] == [(i, "message") for i in (1, 2, 3, 4)]
    assert nothing_stored()


@pytest.mark.parametrize("authorization", [None, "Bearer obx_unknown", "Basic dXNlcjpwYXNz"])
def test_batch_without_a_live_token_is_401(client, token, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = client.post(BATCH, json={"messages": numbered(2)}, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert nothing_stored()


def test_a_message_over_the_size_limit_is_413_naming_it(app, client, token):
    app.config["MAX_MESSAGE_BYTES"] = 4096
    app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024
    messages = numbered(3)
    messages[2]["text"] = "x" * 5000
    response = batch(client, token, messages)
    assert response.status_code == 413
    assert response.get_json()["errors"] == [
        {"index": 2, "field": "size",
         "error": "bodies and attachments (5000 bytes) over the limit of 4096 bytes "
                  "(OUTBOX_MAX_MESSAGE_BYTES)"}]  # fmt: skip
    assert nothing_stored()


@pytest.mark.all_databases
def test_attachments_are_stored_in_chunks_with_their_message(client, token, monkeypatch):
    monkeypatch.setattr(attachments, "CHUNK_BYTES", 4)
    messages = numbered(3)
    messages[0]["attachments"] = [{"filename": "a.txt", "content": "aGVsbG8gdGhlcmU="}]
    messages[2]["attachments"] = [
        {"filename": "b.bin", "content_type": "application/pdf", "content": "JVBERg=="},
        {"filename": "dir/c.png", "content": base64.b64encode(b"\x89PNG").decode()},
    ]
    response = batch(client, token, messages)
    assert response.status_code == 201
    ids = [a["id"] for a in response.get_json()["messages"]]
    assert queue.read_attachments(ids[0], 1) == [Upload("a.txt", "text/plain", b"hello there")]
    assert queue.read_attachments(ids[1], 0) == []
    assert queue.read_attachments(ids[2], 2) == [
        Upload("b.bin", "application/pdf", b"%PDF"),
        Upload("c.png", "image/png", b"\x89PNG"),
    ]
    assert stored() == {"messages": 3, "attachments": 3, "attachment_chunks": 5}


@pytest.mark.all_databases
def test_repeated_idempotency_key_replays_the_batch(client, token):
    first = batch(client, token, numbered(3), key="run-7")
    assert first.status_code == 201
    again = batch(client, token, numbered(3), key="run-7")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert stored()["messages"] == 3


@pytest.mark.all_databases
@pytest.mark.parametrize("other", [numbered(2), numbered(4), numbered(3, priority=1)])
def test_idempotency_key_reused_for_another_batch_is_409(client, token, other):
    first = batch(client, token, numbered(3), key="run-7")
    response = batch(client, token, other, key="run-7")
    assert response.status_code == 409
    assert response.get_json()["id"] == first.get_json()["messages"][0]["id"]
    assert stored()["messages"] == 3


@pytest.mark.all_databases
def test_batch_keys_and_single_message_keys_do_not_meet(client, token):
    single = post(client, token, key="k1")
    response = batch(client, token, numbered(2), key="k1")
    assert (single.status_code, response.status_code) == (201, 201)
    assert "Idempotent-Replayed" not in response.headers
    again = post(client, token, key="k1")
    assert again.get_json()["id"] == single.get_json()["id"]
    assert stored()["messages"] == 3


@pytest.mark.parametrize("key", ["x" * 251, "two words", "", "ключ"])
def test_invalid_batch_idempotency_key_is_400(client, token, key):
    response = batch(client, token, numbered(2), key=key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.get_json()["error"]
    assert nothing_stored()


@pytest.mark.all_databases
def test_longest_batch_key_fits_with_the_place_of_the_last_message(client, token):
    key = "k" * 250
    response = batch(client, token, numbered(1000), key=key)
    assert response.status_code == 201
    assert batch(client, token, numbered(1000), key=key).get_json() == response.get_json()


@pytest.mark.all_databases
def test_batched_messages_are_claimed_and_sent_by_the_worker(smtp_app, smtp, client, token):
    messages = numbered(6)
    messages[4]["attachments"] = [{"filename": "a.txt", "content": "aGk="}]
    response = batch(client, token, messages)
    answered = response.get_json()["messages"]
    assert Worker().drain() == Tally(sent=6)
    assert sorted(smtp.recorder.message_ids()) == sorted(a["message_id"] for a in answered)
    by_id = {r.message_id: r for r in smtp.received}
    for n, found in enumerate(answered):
        received = by_id[found["message_id"]]
        assert received.rcpt_tos == [f"rcpt{n}@example.com"]
        assert f"Subject: message {n}".encode() in received.content
    assert b'filename="a.txt"' in by_id[answered[4]["message_id"]].content
    rows = rows_by_id([a["id"] for a in answered])
    assert {r.status for r in rows.values()} == {Status.SENT}


def test_unreachable_database_is_503_and_never_201(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    for url in ("mysql+pymysql://root@127.0.0.1:1/nothing",
                "postgresql+psycopg://postgres@127.0.0.1:1/nothing"):  # fmt: skip
        app = create_app(base_config(url))
        with app.app_context():
            response = batch(app.test_client(), "obx_x", numbered(2))
            assert response.status_code == 503, url
            assert int(response.headers["Retry-After"]) > 0
            dispose_engines()
