"""POST /api/mailings: one body stored once, a row per recipient, every fault named."""

import io
import json
import subprocess
import tracemalloc

import pytest
from sqlalchemy import select

from outbox.api import openapi
from outbox.auth import tokens
from outbox.capabilities.mailings import head, stream
from outbox.core.recipients import encode
from outbox.models import Mailing, Suppression, utcnow
from outbox.models.db import db
from tests.support.mailing_helpers import MAILINGS, auth, body, counts, post, rows_of


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return tokens.create("shop")


@pytest.mark.all_databases
def test_a_mailing_stores_its_body_once_and_a_bodiless_row_per_recipient(client, token):
    response = post(client, token, body(html="<p>Hi {{ first }}</p>"))
    assert response.status_code == 201, response.get_json()
    answer = response.get_json()
    assert answer["recipients"] == 2 and answer["state"] == "open"
    mailing = db.session.get(Mailing, answer["id"])
    assert mailing is not None
    assert (mailing.subject, mailing.html_body) == ("Hello {{ first }}", "<p>Hi {{ first }}</p>")
    assert (mailing.from_addr, mailing.from_name, mailing.recipient_count) == (
        "news@example.com", "News", 2,
    )  # fmt: skip
    rows = rows_of(mailing.id)
    assert [encode(r.recipients) for r in rows] == [
        [{"kind": "to", "address": "ann@example.com", "name": "Ann"}],
        [{"kind": "to", "address": "bob@example.net", "name": ""}],
    ]
    assert [r.fields for r in rows] == [{"first": "Ann", "plan": "gold"},
                                        {"first": "Bob", "plan": "tin"}]  # fmt: skip
    assert [r.subject for r in rows] == ["Hello Ann", "Hello Bob"]  # each its own, for the pages
    assert all((r.text_body, r.html_body) == (None, None) for r in rows)
    assert all(r.status == "queued" and r.from_addr == "news@example.com" for r in rows)
    assert len({r.message_id for r in rows}) == 2
    shown = client.get(response.headers["Location"], headers=auth(token)).get_json()
    assert shown["progress"]["queued"] == 2 and shown["recipients"] == 2
    # Each recipient's row names its mailing over the API; a message of its own names none.
    one = client.get(f"/api/messages/{rows[0].id}", headers=auth(token)).get_json()
    assert one["mailing_id"] == mailing.id and one["to"] == ["Ann <ann@example.com>"]
    listed = client.get("/api/messages?status=queued", headers=auth(token)).get_json()
    assert {m["mailing_id"] for m in listed["messages"]} == {mailing.id}
    alone = client.post("/api/messages", json={"from": "a@example.com", "to": "b@example.com",
                        "subject": "s", "text": "t"}, headers=auth(token)).get_json()  # fmt: skip
    assert client.get(f"/api/messages/{alone['id']}", headers=auth(token)).get_json()[
        "mailing_id"] is None  # fmt: skip


@pytest.mark.all_databases
def test_thousands_of_recipients_stream_in_and_a_bad_last_one_leaves_nothing(client, token):
    many = [{"email": f"r{n}@example.com", "fields": {"first": f"R{n}", "plan": "p"}}
            for n in range(5000)]  # fmt: skip
    response = post(client, token, body(many))
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["recipients"] == 5000
    assert len(rows_of(response.get_json()["id"])) == 5000
    before = counts()
    many[-1] = {"email": "not an address", "fields": {"first": "X", "plan": "p"}}
    refused = post(client, token, body(many))
    assert refused.status_code == 422
    (error,) = refused.get_json()["errors"]
    assert (error["index"], error["field"]) == (4999, "email")
    assert "not an address" in error["error"]
    assert counts() == before  # neither the mailing nor its first 4,999 rows


def errors_of(response) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    assert response.status_code == 422, response.get_json()
    return response.get_json()["errors"]


def test_a_template_syntax_error_is_named_with_its_field_and_line(client, token):
    errors = errors_of(post(client, token, body(text="Hi\n{{ first ")))
    assert errors == [{"field": "text", "error": errors[0]["error"]}]
    assert errors[0]["error"].startswith("line 2:")
    assert counts() == (0, 0)


def test_a_recipient_missing_a_field_the_templates_use_is_named(client, token):
    recipients = [{"email": "a@example.com", "fields": {"first": "A", "plan": "p"}},
                  {"email": "b@example.com", "fields": {"first": "B"}}]  # fmt: skip
    errors = errors_of(post(client, token, body(recipients)))
    assert errors == [{"index": 1, "field": "fields.plan",
                       "error": "is used by the templates but not given"}]  # fmt: skip


def test_a_field_named_as_a_recipients_own_variable_is_refused_naming_it(client, token):
    """email, name and unsubscribe_token are the recipient's own: a field would be hidden."""
    recipients = [{"email": "a@example.com", "fields": {"name": "Ann", "first": "A", "plan": "p"}},
                  {"email": "b@example.com", "fields": {"email": "x@example.com",
                                                        "unsubscribe_token": "t",
                                                        "first": "B", "plan": "p"}}]  # fmt: skip
    errors = errors_of(post(client, token, body(recipients, text="Hello {{ name }}")))
    assert [(e["index"], e["field"]) for e in errors] == [
        (0, "fields.name"), (1, "fields.email"), (1, "fields.unsubscribe_token"),
    ]  # fmt: skip
    assert "the recipient's own name" in errors[0]["error"]
    assert counts() == (0, 0)
    named = [{"email": "a@example.com", "name": "Ann", "fields": {"first": "A", "plan": "p"}}]
    assert post(client, token, body(named, text="Hello {{ name }}")).status_code == 201


def test_malformed_addresses_unknown_keys_and_header_injection_are_named(client, token):
    recipients = [
        {"email": "ok@example.com", "fields": {"first": "A", "plan": "p"}},
        {"email": "no-at-sign", "fields": {"first": "B", "plan": "p"}},
        {"email": "c@example.com", "name": "C\r\nBcc: x@evil.example", "fields":
         {"first": "C", "plan": "p"}},
        {"email": "d@example.com", "fields": {"first": "D\r\nBcc: x@evil.example", "plan": "p"}},
        {"email": "e@example.com", "fields": {"first": "E", "plan": "p"}, "colour": "red"},
        "f@example.com",
    ]  # fmt: skip
    errors = errors_of(post(client, token, body(recipients)))
    assert [(e["index"], e["field"]) for e in errors] == [
        (1, "email"), (2, "name"), (3, "fields.first"), (4, "colour"), (5, "recipient"),
    ]  # fmt: skip
    assert "line break" in errors[1]["error"] and "subject" in errors[2]["error"]
    assert counts() == (0, 0)


def test_the_mailings_own_fields_are_checked_as_a_messages_are(client, token):
    payload = body(**{"from": "nobody", "headers": {"Subject": "x"}, "cc": ["a@example.com"],
                      "unsubscribe_url": "http://plain.example/u"})  # fmt: skip
    fields = {e["field"] for e in errors_of(post(client, token, payload))}
    assert fields == {"from", "headers", "cc", "unsubscribe_url"}


def test_the_sandbox_refuses_unsafe_template_code(client, token):
    payload = body(subject="{{ ''.__class__.__mro__ }}")
    (error,) = errors_of(post(client, token, payload))
    assert error["field"] == "subject" and "unsafe" in error["error"]
    assert counts() == (0, 0)


def test_bodies_that_are_not_a_mailing_are_refused_with_the_reason(client, token):
    bad_json = post(client, token, b'{"subject": "x", "recipients": [')
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.get_json()["error"]
    assert errors_of(post(client, token, body([])))[0]["field"] == "recipients"
    no_list = {k: v for k, v in body().items() if k != "recipients"}
    assert errors_of(post(client, token, no_list))[0]["error"].startswith("required")
    late = json.dumps(body()).removesuffix("}") + ', "priority": "high"}'
    (error,) = errors_of(post(client, token, late.encode()))
    assert error["field"] == "priority"  # a field after the recipients is checked as well
    assert counts() == (0, 0)


FIELDS = {"from": "News <news@example.com>", "subject": "Hello {{ first }}",
          "text": "Dear {{ first }}", "html": "<p>Dear {{ first }}</p>", "priority": 5}  # fmt: skip
PLACES = {"first": 0, "after an incomplete part": 2, "after a complete part": 3, "last": 5}


@pytest.mark.parametrize("place", PLACES.values(), ids=PLACES.keys())
def test_recipients_may_come_anywhere_in_the_object(client, token, place):
    """JSON gives an object's keys no order: every field counts wherever it comes."""
    people = [{"email": f"r{n}@example.com", "fields": {"first": f"R{n}"}} for n in range(2_500)]
    items = list(FIELDS.items())
    items.insert(place, ("recipients", people))
    response = post(client, token, dict(items))
    assert response.status_code == 201, response.get_json()
    mailing = db.session.get(Mailing, response.get_json()["id"])
    assert mailing is not None and mailing.recipient_count == 2_500
    assert (mailing.html_body, mailing.priority) == (FIELDS["html"], 5)
    rows = rows_of(mailing.id)
    assert len(rows) == 2_500 and {row.priority for row in rows} == {5}
    assert counts() == (1, 2_500)


@pytest.mark.parametrize("place", [0, 2, 5], ids=["first", "middle", "last"])
def test_curl_posts_recipients_anywhere_to_the_served_api(served, token, tmp_path, place):  # noqa: F811
    items = list(FIELDS.items())
    items.insert(place, ("recipients", [{"email": "ann@example.com", "fields": {"first": "A"}}]))
    (tmp_path / "mailing.json").write_text(json.dumps(dict(items)))
    answer = subprocess.run(
        ["curl", "-sS", "--max-time", "60", f"{served.url}{MAILINGS}",
         "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json",
         "--data-binary", f"@{tmp_path / 'mailing.json'}", "-w", "\\n%{http_code}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    said, code = answer.rsplit("\n", 1)
    assert code == "201", said
    mailing = db.session.get(Mailing, json.loads(said)["id"])
    assert mailing is not None and (mailing.html_body, mailing.priority) == (FIELDS["html"], 5)


@pytest.mark.all_databases
def test_a_field_after_recipients_already_stored_has_them_taken_again(client, token):
    """The fields before them made a mailing, so a chunk was stored: rolled back, redone."""
    people = [{"email": f"r{n}@example.com", "fields": {"first": f"R{n}"}} for n in range(2_100)]
    items = list(FIELDS.items())
    items.insert(3, ("recipients", people))
    response = post(client, token, dict(items))
    assert response.status_code == 201, response.get_json()
    rows = rows_of(response.get_json()["id"])
    assert len(rows) == 2_100 and {row.priority for row in rows} == {5}
    assert counts() == (1, 2_100)


def test_a_spool_gives_back_what_it_took_in_order_past_its_memory():
    items = [{"email": f"r{n}@example.com", "fields": {"n": n, "x": 1.5, "y": [None, True]}}
             for n in range(10_000)]  # fmt: skip
    with stream.Spool() as spool:
        for item in items:
            spool.add(item)
        assert spool.file._rolled  # on disk, past SPOOL_MEMORY
        assert list(spool) == items


def test_a_repeated_idempotency_key_answers_the_first_mailing(client, token):
    first = post(client, token, body(), **{"Idempotency-Key": "news-17"})
    again = post(client, token, body(), **{"Idempotency-Key": "news-17"})
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert counts() == (1, 2)


def test_suppressed_recipients_are_stored_marked_as_the_enqueue_marks_them(client, token):
    db.session.add(Suppression(address="bob@example.net", key="bob@example.net",
                               reason="hard bounce", source="manual", created_at=utcnow(),
                               created_by="test"))  # fmt: skip
    db.session.commit()
    response = post(client, token, body())
    assert response.status_code == 201
    ann, bob = rows_of(response.get_json()["id"])
    assert ann.status == "queued"
    assert (bob.status, bob.recipients[0].state) == ("failed", "suppressed")


def test_a_token_without_the_send_scope_may_not_create_a_mailing(client, app):
    reader = tokens.create("reader", ["read"])
    assert post(client, reader, body()).status_code == 403
    assert db.session.scalars(select(Mailing)).all() == []


def test_the_openapi_document_describes_the_mailing_endpoints():
    document = openapi.document()
    paths = {p for p in document["paths"] if p.startswith("/api/mailings")}
    assert paths == {"/api/mailings", "/api/mailings/{id}", "/api/mailings/{id}/recipients",
                     "/api/mailings/{id}/pause", "/api/mailings/{id}/resume",
                     "/api/mailings/{id}/cancel"}  # fmt: skip
    schemas = document["components"]["schemas"]
    new = schemas["NewMailing"]["properties"]
    assert set(new) == {*head.FIELDS, "recipients"}
    assert new["priority"] == schemas["NewMessage"]["properties"]["priority"]
    assert new["recipients"]["maxItems"] == 100_000
    assert "unsubscribe" in schemas["Suppression"]["properties"]["source"]["enum"]


def test_a_request_over_the_size_limit_is_413_naming_the_limit(app, client, token):
    app.config["MAX_CONTENT_LENGTH"] = 2_000
    many = [{"email": f"r{n}@example.com", "fields": {"first": "R", "plan": "p"}}
            for n in range(100)]  # fmt: skip
    response = post(client, token, body(many))
    assert response.status_code == 413 and response.get_json()["limit"] == 2_000
    assert counts() == (0, 0)


def test_the_body_is_read_as_a_stream_memory_does_not_grow_with_it(client, token):
    """Python's allocations while a mailing is taken in: a chunk of rows, whatever the body."""

    def peak(count: int) -> int:
        fields = {"first": "R", "plan": "p" * 20}
        people = [{"email": f"r{n}@example.com", "name": f"Reader {n}", "fields": fields}
                  for n in range(count)]  # fmt: skip
        data = json.dumps(body(people)).encode()
        stream = io.BytesIO(data)  # made before the count starts, as a socket's would be
        headers = {**auth(token), "Content-Length": str(len(data))}
        tracemalloc.start()
        try:
            response = client.post(MAILINGS, input_stream=stream, headers=headers,
                                   content_type="application/json")  # fmt: skip
            assert response.status_code == 201
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(4_000), peak(24_000)  # 0.5 MB and 2.9 MB of JSON
    assert large < 1.3 * small
