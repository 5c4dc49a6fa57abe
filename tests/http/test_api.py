"""The HTTP API: enqueue, idempotency, read, resend, cancel; what it stores, on each database."""

import io
import time
from datetime import datetime
from email.header import decode_header, make_header
from email.utils import getaddresses

import pymysql
import pytest
import sqlalchemy as sa
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from outbox import create_app, queue
from outbox.auth import tokens
from outbox.core.checks import Upload
from outbox.core.status import Status
from outbox.models import Attempt, utcnow
from outbox.models.db import db, dispose_engines
from tests.support import outcomes
from tests.support.api import MESSAGES, RETRY, VALID, auth, b64, nothing_stored, post, stored
from tests.support.app import base_config
from tests.support.rows import fresh


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def names(column: str) -> list[tuple[str, str]]:
    """(display name, address) pairs of a stored address column, names decoded."""
    return [(str(make_header(decode_header(n))), a) for n, a in getaddresses([column])]


@pytest.mark.all_databases
def test_json_message_is_stored_with_every_field(client, token):
    body = {
        "to": ["Ann <ann@example.com>", "bob@example.com"],
        "cc": "cc1@example.com, Carl <cc2@example.com>",
        "bcc": ["hidden@example.com"],
        "from": "Shop <shop@example.com>",
        "reply_to": "help@example.com",
        "subject": "Your order",
        "text": "Plain",
        "html": "<p>Rich</p>",
        "priority": 5,
        "send_after": "2030-01-02T03:04:05+02:00",
        "headers": {"X-Campaign": "spring", "List-Unsubscribe": "<mailto:u@example.com>"},
        "attachments": [
            {"filename": "a.txt", "content_type": "text/plain", "content": b64(b"first")},
            {"filename": "b.pdf", "content": b64(b"%PDF-1.4")},
        ],
    }
    response = post(client, token, body)
    assert response.status_code == 201
    answer = response.get_json()
    assert answer["status"] == "queued" and answer["message_id"].startswith("<")
    assert response.headers["Location"].endswith(f"{MESSAGES}/{answer['id']}")
    assert stored() == {"messages": 1, "attachments": 2, "attachment_chunks": 2}
    row = fresh(answer["id"])
    assert row.message_id == answer["message_id"]
    assert names(row.listed("to")) == [("Ann", "ann@example.com"), ("", "bob@example.com")]
    assert names(row.listed("cc")) == [("", "cc1@example.com"), ("Carl", "cc2@example.com")]
    assert (row.listed("bcc"), row.reply_to) == ("hidden@example.com", "help@example.com")
    assert (str(row.sender), row.subject) == ("Shop <shop@example.com>", "Your order")
    assert (row.text_body, row.html_body, row.priority) == ("Plain", "<p>Rich</p>", 5)
    assert row.send_after == datetime(2030, 1, 2, 1, 4, 5)  # naive UTC
    assert row.next_attempt_at == row.send_after
    assert row.headers == body["headers"]
    assert queue.read_attachments(row.id) == [
        Upload("a.txt", "text/plain", b"first"),
        Upload("b.pdf", "application/pdf", b"%PDF-1.4"),
    ]
    shown = client.get(response.headers["Location"], headers=auth(token))
    assert shown.status_code == 200 and shown.get_json()["id"] == answer["id"]


def test_form_takes_repeated_and_comma_separated_recipients(client, token):
    form = {"to": ["a@example.com", "b@example.com, c@example.com"], "cc": "d@example.com",
            "html": "<p>Hi</p>", "priority": "-3", "send_after": "2030-05-06T07:08:09"}  # fmt: skip
    response = client.post(MESSAGES, data=form, headers=auth(token))
    assert response.status_code == 201
    row = fresh(response.get_json()["id"])
    assert row.listed("to") == "a@example.com, b@example.com, c@example.com"
    assert (row.listed("cc"), row.from_addr) == ("d@example.com", "outbox@example.com")
    assert (row.text_body, row.html_body, row.priority) == (None, "<p>Hi</p>", -3)
    assert row.send_after == datetime(2030, 5, 6, 7, 8, 9)
    assert stored() == {"messages": 1, "attachments": 0, "attachment_chunks": 0}


def test_multipart_takes_several_attachments(client, token):
    files = [(io.BytesIO(b"one"), "one.txt", "text/plain"),
             (io.BytesIO(b"\x89PNG two"), "dir/two.png", "application/octet-stream")]  # fmt: skip
    form = {**VALID, "attachments": files}
    response = client.post(MESSAGES, data=form, headers=auth(token))
    assert response.status_code == 201
    assert queue.read_attachments(response.get_json()["id"]) == [
        Upload("one.txt", "text/plain", b"one"),
        Upload("two.png", "image/png", b"\x89PNG two"),
    ]
    assert stored() == {"messages": 1, "attachments": 2, "attachment_chunks": 2}


@pytest.mark.all_databases
def test_html_only_unicode_message_with_3_mib_attachment_round_trips(client, token):
    big = bytes(range(256)) * (3 * 1024 * 1024 // 256)
    form = {"to": "Jörg Müller <joerg@example.com>", "from": "Zoë Ärger <zoe@example.com>",
            "subject": "Grüße aus Köln 👋", "html": "<p>Schöne Grüße – 你好</p>",
            "attachments": FileStorage(io.BytesIO(big), "Bericht Größe 📎.bin")}  # fmt: skip
    # Encoded in memory: the test client would spool this body to a temporary
    # file that nothing closes.
    boundary, body = encode_multipart(MultiDict(form))
    content_type = f"multipart/form-data; boundary={boundary}"
    response = client.post(MESSAGES, data=body, content_type=content_type, headers=auth(token))
    assert response.status_code == 201
    message_id = response.get_json()["id"]
    shown = client.get(f"{MESSAGES}/{message_id}", headers=auth(token)).get_json()
    assert shown["subject"] == "Grüße aus Köln 👋"
    row = fresh(message_id)
    assert names(row.listed("to")) == [("Jörg Müller", "joerg@example.com")]
    assert (row.from_name, row.from_addr) == ("Zoë Ärger", "zoe@example.com")
    assert (row.text_body, row.html_body) == (None, "<p>Schöne Grüße – 你好</p>")
    assert queue.read_attachments(message_id) == [
        Upload("Bericht Größe 📎.bin", "application/octet-stream", big)
    ]
    assert stored() == {"messages": 1, "attachments": 1, "attachment_chunks": 3}


@pytest.mark.all_databases
def test_repeated_idempotency_key_replays_the_first_message(client, token):
    body = {**VALID, "attachments": [{"filename": "a.txt", "content": b64(b"hi")}]}
    first = post(client, token, body, key="order-17")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    before = stored()
    again = post(client, token, body, key="order-17")
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert stored() == before == {"messages": 1, "attachments": 1, "attachment_chunks": 1}


@pytest.mark.all_databases
def test_idempotency_key_reused_for_another_message_is_409(client, token):
    first = post(client, token, key="order-17")
    body = {**VALID, "attachments": [{"filename": "a.txt", "content": b64(b"hi")}]}
    other = post(client, token, body, key="order-17")
    assert other.status_code == 409
    assert other.get_json()["id"] == first.get_json()["id"]
    assert stored() == {"messages": 1, "attachments": 0, "attachment_chunks": 0}
    assert fresh(first.get_json()["id"]).subject == "Hello"


@pytest.mark.all_databases
def test_idempotency_keys_are_scoped_per_token(client, token):
    other_token = tokens.create("newsletter")
    first = post(client, token, key="k1")
    second = post(client, other_token, key="k1")
    assert (first.status_code, second.status_code) == (201, 201)
    assert "Idempotent-Replayed" not in second.headers
    assert first.get_json()["id"] != second.get_json()["id"]
    assert stored()["messages"] == 2


@pytest.mark.all_databases
def test_idempotency_keys_differing_in_case_are_different_keys(client, token):
    first = post(client, token, key="Order-17")
    second = post(client, token, key="order-17")
    assert "Idempotent-Replayed" not in second.headers
    assert first.get_json()["id"] != second.get_json()["id"]


@pytest.mark.parametrize("key", ["x" * 300, "two words", "", "tab\there", "ключ"])
def test_invalid_idempotency_key_is_400(client, token, key):
    response = post(client, token, key=key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.get_json()["error"]
    assert nothing_stored()


def make_in(client, token, status: Status) -> int:
    """A message created over the API, then moved to status as the worker would."""
    message_id = post(client, token).get_json()["id"]
    if status is Status.CANCELLED:
        queue.cancel(message_id)
    elif status is not Status.QUEUED:
        (claim,) = queue.claim_batch("w1", 10)
        now = utcnow()
        if status is Status.DEFERRED:
            outcomes.deferred(claim, now, 451, "451 try later", RETRY)
        elif status is Status.FAILED:
            outcomes.failed(claim, now, 550, "550 no such user")
        elif status is Status.SENT:
            outcomes.sent(claim, now)
    assert fresh(message_id).status == status
    return message_id


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") + "Z" if moment else None


@pytest.mark.parametrize(
    "status, error", [(Status.FAILED, "550 no such user"), (Status.SENT, None)]
)
def test_show_reports_the_delivery_state(client, token, status, error):
    message_id = make_in(client, token, status)
    response = client.get(f"{MESSAGES}/{message_id}", headers=auth(token))
    assert response.status_code == 200
    shown = response.get_json()
    row = fresh(message_id)
    assert shown["id"] == message_id and shown["message_id"] == row.message_id
    assert (shown["status"], shown["attempts"], shown["last_error"]) == (status, 1, error)
    assert shown["last_retry"] is not None and shown["last_retry"] == iso(row.last_retry)
    assert shown["next_attempt_at"] is None  # nothing is due once sent or failed
    assert shown["sent_at"] == (shown["last_retry"] if status is Status.SENT else None)
    (attempt,) = shown["attempt_log"]
    outcome = "sent" if status is Status.SENT else "failed"
    assert (attempt["outcome"], attempt["error"]) == (outcome, error)
    assert attempt["finished_at"] == shown["last_retry"] and attempt["started_at"]
    assert shown["attachments"] == [] and shown["reply_to"] is None


@pytest.mark.all_databases
@pytest.mark.parametrize("action", ["", "/resend", "/cancel"])
@pytest.mark.parametrize("message_id", [12345, 2**63, 10**30])
def test_unknown_message_is_404_json(client, token, action, message_id):
    method = client.get if not action else client.post
    response = method(f"{MESSAGES}/{message_id}{action}", headers=auth(token))
    assert response.status_code == 404
    assert str(message_id) in response.get_json()["error"]
    assert nothing_stored()


MOVES = [
    ("cancel", Status.QUEUED, Status.CANCELLED),
    ("cancel", Status.DEFERRED, Status.CANCELLED),
    ("resend", Status.FAILED, Status.QUEUED),
    ("resend", Status.CANCELLED, Status.QUEUED),
]
REFUSED = [("cancel", s) for s in (Status.SENDING, Status.SENT, Status.FAILED, Status.CANCELLED)]
REFUSED += [("resend", s) for s in (Status.QUEUED, Status.DEFERRED, Status.SENDING, Status.SENT)]


@pytest.mark.parametrize("action, start, end", MOVES)
def test_move_keeps_the_attempt_history(client, token, action, start, end):
    message_id = make_in(client, token, start)
    before = fresh(message_id)
    attempts, last_error = before.attempts, before.last_error
    response = client.post(f"{MESSAGES}/{message_id}/{action}", headers=auth(token))
    assert response.status_code == 200
    assert response.get_json()["status"] == end
    row = fresh(message_id)
    assert (row.status, row.attempts, row.last_error) == (end, attempts, last_error)
    assert db.session.query(Attempt).filter_by(message_pk=message_id).count() == attempts


@pytest.mark.parametrize("action, start", REFUSED)
def test_move_from_the_wrong_status_is_409(client, token, action, start):
    message_id = make_in(client, token, start)
    before = fresh(message_id)
    state = (before.status, before.attempts, before.next_attempt_at, before.max_attempts)
    response = client.post(f"{MESSAGES}/{message_id}/{action}", headers=auth(token))
    assert response.status_code == 409
    assert response.get_json()["status"] == start
    row = fresh(message_id)
    assert (row.status, row.attempts, row.next_attempt_at, row.max_attempts) == state


def test_every_bad_field_is_named_in_one_answer(client, token):
    bad = {**VALID, "to": "nobody", "cc": "c@example.com\r\nBcc: v@example.com", "from": "x@",
           "subject": "a\nb", "headers": {"Bcc": "v@example.com"}, "text": None,
           "send_after": "soon", "priority": "1e3",
           "attachments": [{"filename": "a.txt", "content": "%%%"}]}  # fmt: skip
    response = post(client, token, bad)
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == {
        "to", "cc", "from", "subject", "headers", "text", "send_after", "priority", "attachments"
    }  # fmt: skip
    assert nothing_stored()


@pytest.mark.parametrize("to, bad", [("rcpt@example.com", {"attachments"}),
                                     ("nobody", {"to", "attachments"})])  # fmt: skip
def test_bad_upload_is_named_with_the_other_bad_fields(client, token, to, bad):
    """A file name with a line break, sent the RFC 2231 way."""
    parts = [
        f'name="to"\r\n\r\n{to}',
        'name="text"\r\n\r\nHi',
        "name=\"attachments\"; filename*=UTF-8''a%0D%0ABcc%3A%20v.txt\r\n"
        "Content-Type: text/plain\r\n\r\nhi",
    ]
    body = "".join(f"--B\r\nContent-Disposition: form-data; {p}\r\n" for p in parts) + "--B--\r\n"
    response = client.post(
        MESSAGES, data=body.encode(), content_type="multipart/form-data; boundary=B",
        headers=auth(token),
    )  # fmt: skip
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == bad
    assert nothing_stored()


def test_bad_form_fields_are_422(client, token):
    form = {"to": ["a@example.com", "nobody"], "text": "Hi", "priority": "soon",
            "subject": "a\r\nBcc: v@example.com"}  # fmt: skip
    response = client.post(MESSAGES, data=form, headers=auth(token))
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == {"to", "priority", "subject"}
    assert nothing_stored()


@pytest.mark.parametrize(
    "data, content_type",
    [("[1, 2]", "application/json"), ('{"to": ', "application/json"),
     ('"text"', "application/json")],
)  # fmt: skip
def test_body_that_is_not_a_json_object_or_form_is_400(client, token, data, content_type):
    response = client.post(MESSAGES, data=data, content_type=content_type, headers=auth(token))
    assert response.status_code == 400
    assert "body" in response.get_json()["errors"]
    assert nothing_stored()


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "{token}", "Token {token}",
     "Bearer {token}x", "Bearer obx_unknown"],
)  # fmt: skip
def test_request_without_a_live_token_is_401(client, token, authorization):
    headers = {} if authorization is None else {"Authorization": authorization.format(token=token)}
    response = client.post(MESSAGES, json=VALID, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "token" in response.get_json()["error"]
    assert nothing_stored()


def test_revoked_token_is_401_everywhere(client, token):
    message_id = post(client, token).get_json()["id"]
    assert tokens.revoke("shop")
    for path in (MESSAGES, f"{MESSAGES}/{message_id}/cancel", f"{MESSAGES}/{message_id}/resend"):
        response = client.post(path, json=VALID, headers=auth(token))
        assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    response = client.get(f"{MESSAGES}/{message_id}", headers=auth(token))
    assert response.status_code == 401
    assert stored()["messages"] == 1
    assert fresh(message_id).status == Status.QUEUED


def oversized(kind: str, size: int) -> dict[str, object]:
    if kind == "json":
        return {"json": {**VALID, "text": "x" * size}}
    if kind == "form":
        return {"data": {**VALID, "text": "x" * size}}
    return {"data": {**VALID, "attachments": (io.BytesIO(b"x" * size), "big.bin")}}


@pytest.mark.parametrize("kind", ["json", "form", "multipart"])
@pytest.mark.parametrize("limit", ["MAX_CONTENT_LENGTH", "MAX_MESSAGE_BYTES"])
def test_message_over_the_size_limit_is_413(app, client, token, kind, limit):
    """Over the request limit Werkzeug refuses the body; under it, the message is checked."""
    app.config["MAX_MESSAGE_BYTES"] = 4096
    app.config["MAX_CONTENT_LENGTH"] = 4096 if limit == "MAX_CONTENT_LENGTH" else 1024 * 1024
    assert client.post(MESSAGES, headers=auth(token), **oversized(kind, 3000)).status_code == 201
    before = stored()
    response = client.post(MESSAGES, headers=auth(token), **oversized(kind, 5000))
    assert response.status_code == 413
    answer = response.get_json()
    assert "limit of 4096 bytes (OUTBOX_MAX_MESSAGE_BYTES)" in answer["error"]
    assert answer["limit"] == 4096
    assert answer["error"].startswith("bodies and attachments (") == (limit == "MAX_MESSAGE_BYTES")
    assert stored() == before


def test_unreachable_database_is_503_and_never_201(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    for url in ("mysql+pymysql://root@127.0.0.1:1/nothing",
                "postgresql+psycopg://postgres@127.0.0.1:1/nothing"):  # fmt: skip
        app = create_app(base_config(url))
        with app.app_context():
            client = app.test_client()
            for method, path in [("POST", MESSAGES), ("GET", f"{MESSAGES}/1"),
                                 ("POST", f"{MESSAGES}/1/cancel")]:  # fmt: skip
                response = client.open(path, method=method, json=VALID, headers=auth("obx_x"))
                assert response.status_code == 503, (url, path)
                assert "database" in response.get_json()["error"]
                assert int(response.headers["Retry-After"]) > 0
            dispose_engines()


def test_display_names_are_kept_readable(client, token):
    body = {"to": ['"Doe, Zoë" <zoe@example.com>', "Ärger <a@example.com>"], "text": "hi"}
    created = post(client, token, body).get_json()
    assert created["to"] == ['"Doe, Zoë" <zoe@example.com>', "Ärger <a@example.com>"]


@pytest.mark.parametrize("path", [MESSAGES, f"{MESSAGES}/999", "/api/nothing"])
def test_api_answers_carry_api_headers_and_no_session(signed_in, token, path):
    """No cookie session is read or written for the API, signed-in browser or not."""
    response = signed_in.post(path, json=VALID, headers=auth(token))
    assert response.status_code in (201, 404, 405)
    assert "Set-Cookie" not in response.headers
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert signed_in.get("/").status_code == 200  # the page session is still there


def test_a_page_session_does_not_stand_for_a_token(signed_in):
    response = signed_in.post(MESSAGES, json=VALID)
    assert response.status_code == 401 and "Set-Cookie" not in response.headers
    assert nothing_stored()


def kill_connections(url: sa.URL) -> list[int]:
    """End every connection to url's MariaDB database, as a server restart does."""
    admin = pymysql.connect(host=url.host, port=url.port or 3306, user=url.username,
                            password=url.password or "")  # fmt: skip
    with admin.cursor() as cursor:
        cursor.execute("SELECT id FROM information_schema.processlist WHERE db = %s",
                       (url.database,))  # fmt: skip
        killed = [pk for (pk,) in cursor.fetchall()]
        for pk in killed:
            cursor.execute(f"KILL {pk}")
    admin.close()
    time.sleep(0.1)  # the server's FIN reaches each socket
    return killed


@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_pooled_connections_the_server_closed_are_replaced_not_a_503(app, client, token):
    """What the pool's ping did, without its round trip: a closed connection is not used."""
    assert post(client, token).status_code == 201
    db.session.remove()
    assert kill_connections(db.engine.url)
    for _ in range(3):
        assert post(client, token).status_code == 201
    assert stored()["messages"] == 4


@pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)])
@pytest.mark.parametrize(
    ("stored_first", "answer"), [(False, 503), (True, 201)], ids=["before", "after the insert"]
)
def test_connections_lost_during_a_request_are_a_503_or_leave_the_201(
    app, client, token, monkeypatch, stored_first, answer
):  # type: ignore[no-untyped-def]
    """The server goes away while the request's session holds the connection it read the
    token on: in the INSERT the answer is a 503, not a 500; after it the 201 stands."""
    app.extensions[tokens.CACHE] = tokens.Cache(0)  # the request's session reads the token
    assert post(client, token).status_code == 201
    # The INSERT goes to the driver straight (queue.direct): the server goes away there.
    original = pymysql.cursors.Cursor.execute

    def execute(cursor, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not query.startswith("INSERT INTO messages "):
            return original(cursor, query, *args, **kwargs)
        if not stored_first:
            kill_connections(db.engine.url)
        result = original(cursor, query, *args, **kwargs)
        kill_connections(db.engine.url)
        return result

    monkeypatch.setattr(pymysql.cursors.Cursor, "execute", execute)
    response = post(client, token)
    assert response.status_code == answer, response.get_data(as_text=True)
    monkeypatch.undo()
    assert post(client, token).status_code == 201
    assert stored()["messages"] == 2 + stored_first


@pytest.mark.parametrize(
    "db_kind",
    [pytest.param("mariadb", marks=pytest.mark.mariadb),
     pytest.param("postgres", marks=pytest.mark.postgres)],
)  # fmt: skip
def test_an_enqueue_with_a_known_token_makes_no_session(app, client, token, monkeypatch):
    """The token is in the cache and the INSERT runs on the autocommit engine: the request
    has no use for a session, and ending the request must not make one to close it."""
    assert post(client, token).status_code == 201  # the token is now in the cache
    made: list[object] = []
    factory = db.session.registry.createfunc

    def counted():  # type: ignore[no-untyped-def]
        made.append(factory())
        return made[-1]

    monkeypatch.setattr(db.session.registry, "createfunc", counted)
    assert post(client, token).status_code == 201
    assert made == []
    assert stored()["messages"] == 2
