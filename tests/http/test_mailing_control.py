"""A mailing as a whole: append, pause, resume and cancel over the API, and its progress."""

from datetime import timedelta

import jsonschema_rs
import pytest
from sqlalchemy import update

from outbox import queue
from outbox.api import openapi
from outbox.auth import tokens
from outbox.capabilities.mailings import control
from outbox.models import Message, utcnow
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support.mailing_helpers import MAILINGS, auth, body, post, rows_of
from tests.support.metrics import samples, value


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return tokens.create("shop")


def people(first: int, count: int) -> list[dict]:  # type: ignore[type-arg]
    return [{"email": f"p{n}@example.com", "fields": {"first": f"P{n}", "plan": "x"}}
            for n in range(first, first + count)]  # fmt: skip


def act(client, token: str, mailing_id: int, action: str):  # type: ignore[no-untyped-def]
    return client.post(f"{MAILINGS}/{mailing_id}/{action}", headers=auth(token))


@pytest.mark.all_databases
def test_pause_holds_waiting_rows_resume_frees_them_and_cancel_ends_them(
    smtp_app, smtp, client, token, monkeypatch
):
    monkeypatch.setattr(control, "CHUNK", 7)  # several chunks, each its own transaction
    mailing_id = post(client, token, body(people(0, 20))).get_json()["id"]
    claimed = queue.claim_batch("other-worker", 3)  # in flight when the pause comes
    paused = act(client, token, mailing_id, "pause")
    assert paused.status_code == 200
    assert (paused.get_json()["state"], paused.get_json()["moved"]) == ("paused", 17)
    assert Worker().drain() == Tally()  # nothing of it is claimed while paused
    assert paused.get_json()["progress"]["sending"] == 3
    # Appending to a paused mailing adds paused rows.
    added = post(
        client, token, {"recipients": people(20, 5)}, f"{MAILINGS}/{mailing_id}/recipients"
    )
    assert added.status_code == 201 and added.get_json() == {
        "id": mailing_id, "added": 5, "recipients": 25,
    }  # fmt: skip
    assert Worker().drain() == Tally()
    resumed = act(client, token, mailing_id, "resume").get_json()
    assert (resumed["state"], resumed["moved"]) == ("open", 22)
    smtp_app.config["BATCH_SIZE"] = 10
    Worker().drain()
    assert len(smtp.received) == 22
    queue.release(claimed)
    cancelled = act(client, token, mailing_id, "cancel").get_json()
    assert (cancelled["state"], cancelled["moved"]) == ("cancelled", 3)
    progress = client.get(f"{MAILINGS}/{mailing_id}", headers=auth(token)).get_json()["progress"]
    assert (progress["sent"], progress["cancelled"], progress["queued"]) == (22, 3, 0)
    assert act(client, token, mailing_id, "pause").status_code == 409
    late = post(client, token, {"recipients": people(30, 1)}, f"{MAILINGS}/{mailing_id}/recipients")
    assert late.status_code == 409
    assert len(rows_of(mailing_id)) == 25


@pytest.mark.all_databases
def test_progress_counts_each_status_and_the_bounced_in_one_query(client, token):
    mailing_id = post(client, token, body(people(0, 6))).get_json()["id"]
    ids = [r.id for r in rows_of(mailing_id)]
    bounced = [{"kind": "to", "address": "p0@example.com", "name": "", "state": "bounced"}]
    moves = {ids[0]: ("sent", bounced), ids[1]: ("sent", None), ids[2]: ("deferred", None),
             ids[3]: ("failed", None)}  # fmt: skip
    for pk, (status, entries) in moves.items():
        values = {"status": status, **({"recipients": entries} if entries else {})}
        db.session.execute(update(Message).where(Message.id == pk).values(**values))
    db.session.commit()
    found = control.progress([mailing_id, 999])
    assert found[mailing_id] == {"queued": 2, "sending": 0, "sent": 2, "deferred": 1,
                                 "failed": 1, "bounced": 1, "cancelled": 0}  # fmt: skip
    assert sum(found[999].values()) == 0


def test_a_paused_send_after_mailing_resumes_at_its_send_after(client, token):
    later = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    mailing_id = post(client, token, body(send_after=later.isoformat())).get_json()["id"]
    act(client, token, mailing_id, "pause")
    act(client, token, mailing_id, "resume")
    assert {r.next_attempt_at for r in rows_of(mailing_id)} == {later}


def test_append_checks_its_recipients_as_creation_does(client, token):
    mailing_id = post(client, token, body()).get_json()["id"]
    path = f"{MAILINGS}/{mailing_id}/recipients"
    missing = post(client, token, {"recipients": [{"email": "z@example.com"}]}, path)
    assert missing.status_code == 422
    assert {e["field"] for e in missing.get_json()["errors"]} == {"fields.first", "fields.plan"}
    other = post(client, token, {"subject": "x", "recipients": people(0, 1)}, path)
    assert other.get_json()["errors"][0]["field"] == "subject"
    assert post(client, token, {"recipients": people(0, 1)}, f"{MAILINGS}/999/recipients"
                ).status_code == 404  # fmt: skip
    assert len(rows_of(mailing_id)) == 2


def test_each_recipient_stored_counts_as_an_enqueued_message(app, client, token):
    app.config["METRICS_TOKEN"] = "m" * 32

    def enqueued() -> float:
        found = samples(client.get("/metrics", headers=auth("m" * 32)).text)
        return value(found, "outbox_messages_enqueued_total", source="api")

    before = enqueued()
    mailing_id = post(client, token, body(people(0, 3))).get_json()["id"]
    post(client, token, {"recipients": people(3, 2)}, f"{MAILINGS}/{mailing_id}/recipients")
    assert enqueued() - before == 5


def _described(response, path: str) -> list[str]:  # type: ignore[no-untyped-def]
    """What of a POST answer to path the served OpenAPI document does not describe."""
    document = openapi.document()
    answers = document["paths"][path]["post"]["responses"]
    if str(response.status_code) not in answers:
        return [f"{response.status_code} is not an answer of POST {path}"]
    shape = answers[str(response.status_code)]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({"components": document["components"], **shape})
    return [error.message for error in validator.iter_errors(response.get_json())]


def test_every_refusal_of_a_mailing_is_the_one_the_document_describes(app, client, token):
    mailing_id, open_id = (post(client, token, body()).get_json()["id"] for _ in range(2))
    assert act(client, token, mailing_id, "cancel").status_code == 200
    one = f"{MAILINGS}/{{id}}"
    reader = tokens.create("reader", ["read"])
    app.config["MAX_CONTENT_LENGTH"] = 2_000
    refusals = {
        (f"{one}/pause", 409): act(client, token, mailing_id, "pause"),
        (f"{one}/resume", 409): act(client, token, mailing_id, "resume"),
        (f"{one}/cancel", 404): act(client, token, open_id + 1, "cancel"),
        (f"{one}/recipients", 409): post(
            client, token, {"recipients": people(0, 1)}, f"{MAILINGS}/{mailing_id}/recipients"
        ),  # fmt: skip
        (f"{one}/recipients", 400): post(
            client, token, b"[]", f"{MAILINGS}/{open_id}/recipients"
        ),  # fmt: skip
        (MAILINGS, 403): post(client, reader, body()),
        (f"{one}/pause", 403): act(client, reader, mailing_id, "pause"),
        (MAILINGS, 413): post(client, token, body(people(0, 100))),
    }
    for (path, status), response in refusals.items():
        assert response.status_code == status, (path, response.get_json())
        assert _described(response, path) == [], (path, response.get_json())


@pytest.mark.all_databases
def test_a_mailing_id_past_64_bits_is_not_found(client, token):
    past = f"{MAILINGS}/{2**63}"
    answers = [client.post(f"{past}/{action}", headers=auth(token))
               for action in ("pause", "resume", "cancel")]  # fmt: skip
    answers.append(post(client, token, {"recipients": people(0, 1)}, f"{past}/recipients"))
    found = [(r.status_code, r.get_json()) for r in answers]
    assert found == [(404, {"error": f"no mailing {2**63}"})] * 4
