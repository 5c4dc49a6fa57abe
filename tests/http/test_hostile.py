"""Hostile input: header injection, markup on every page, every route shut, secrets kept."""

import http.client
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from email.headerregistry import Address
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import sqlalchemy as sa
from flask import Flask
from werkzeug.serving import make_server

from outbox.auth import accounts, tokens
from outbox.capabilities.bounces import store as bounce_store
from outbox.core.checks import Upload
from outbox.models import Attachment, Message, WorkerBeat, utcnow
from outbox.models.db import db
from outbox.ops import heartbeats
from tests.support import outcomes
from tests.support.api import MESSAGES, VALID, auth, b64, nothing_stored
from tests.support.pages import (
    claim,
    csrf,
    facts,
    field_box,
    htmx,
    parse,
    shown_value,
    sign_in_form,
    sign_in_target,
)
from tests.support.rows import snapshot

# Each ends a line for the email package (str.splitlines), not only CR and LF.
BREAKS = ["\r", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
INJECTED = "Bcc: victim@example.com"
# Every field that becomes a header, with a valid value to append a line break to.
FIELDS = {"to": "rcpt@example.com", "cc": "cc@example.com", "bcc": "b@example.com",
          "from": "shop@example.com", "reply_to": "r@example.com", "subject": "Hi"}  # fmt: skip
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
MARKUP = f"{IMG}{SCRIPT}"


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def injections(value: str) -> list[str]:
    return [f"{value}{brk}{INJECTED}" for brk in BREAKS]


def multipart(fields: dict[str, str], filename: str) -> tuple[bytes, str]:
    """A multipart body with one file, its name sent the RFC 2231 way (any character)."""
    parts = [f'name="{name}"\r\n\r\n{value}' for name, value in fields.items()]
    parts.append(f"name=\"attachments\"; filename*=UTF-8''{quote(filename, safe='')}\r\n"
                 "Content-Type: text/plain\r\n\r\nhi")  # fmt: skip
    body = "".join(f"--B\r\nContent-Disposition: form-data; {p}\r\n" for p in parts) + "--B--\r\n"
    return body.encode(), "multipart/form-data; boundary=B"


@pytest.mark.parametrize("field", [*FIELDS, "headers", "attachments"])
def test_line_break_in_any_json_header_field_is_422_naming_it(client, token, field):
    for value in injections(FIELDS.get(field, "x")):
        if field == "headers":
            bodies = [{**VALID, "headers": {"X-Tag": value}}, {**VALID, "headers": {value: "1"}}]
        elif field == "attachments":
            bodies = [{**VALID, "attachments": [{"filename": value, "content": b64(b"hi")}]}]
        else:
            bodies = [{**VALID, field: value}]
        for body in bodies:
            response = client.post(MESSAGES, json=body, headers=auth(token))
            assert response.status_code == 422, repr(value)
            assert set(response.get_json()["errors"]) == {field}, repr(value)
    assert nothing_stored()


@pytest.mark.parametrize(
    "kind, field",
    [("form", f) for f in FIELDS] + [("multipart", f) for f in [*FIELDS, "attachments"]],
)
def test_line_break_in_any_form_header_field_is_422_naming_it(client, token, kind, field):
    for value in injections(FIELDS.get(field, "x.txt")):
        fields = {"to": "rcpt@example.com", "text": "Hi"}
        if field != "attachments":
            fields[field] = value
        if kind == "form":
            response = client.post(MESSAGES, data=fields, headers=auth(token))
        else:
            data, content_type = multipart(fields, value if field == "attachments" else "a.txt")
            response = client.post(MESSAGES, data=data, content_type=content_type,
                                   headers=auth(token))  # fmt: skip
        assert response.status_code == 422, repr(value)
        assert set(response.get_json()["errors"]) == {field}, repr(value)
    assert nothing_stored()


COMPOSE = {"sender": "from", "to": "to", "cc": "cc", "bcc": "bcc", "reply_to": "reply_to",
           "subject": "subject", "attachments": None}  # fmt: skip


@pytest.mark.parametrize("name", COMPOSE)
def test_line_break_in_any_compose_header_field_is_422_beside_it(signed_in, name):
    token = csrf(signed_in)
    for value in injections(FIELDS.get(COMPOSE[name] or "", "x.txt")):
        fields = {"csrf_token": token, "to": "rcpt@example.com", "text": "Hi"}
        if name != "attachments":
            fields[name] = value
        data, content_type = multipart(fields, value if name == "attachments" else "a.txt")
        response = signed_in.post("/messages/new", data=data, content_type=content_type)
        assert response.status_code == 422, repr(value)
        page = parse(response)
        assert field_box(page, name).find("p", class_="error").text.strip(), repr(value)
        # The one field's error, and the note that the file sent must be chosen again.
        errors = page.find_all("p", class_="error")
        notes = [e for e in errors if "files-again" in e["class"]]
        assert len(notes) == 1 and notes[0].text.startswith("Files are not kept"), repr(value)
        assert [e["id"] for e in errors if e not in notes] == [f"{name}-error"], repr(value)
    assert nothing_stored()


OWN_SCRIPTS = {p.name for p in (Path(__file__).parents[2] / "static").glob("*.js")}


def inert(response) -> str:  # type: ignore[no-untyped-def]
    """The page's HTML, checked to hold no tag, attribute or script that came from data."""
    html = response.get_data(as_text=True)
    assert "<script>alert" not in html and "<img" not in html and "onerror=alert(1)>" not in html
    page = parse(html)
    scripts = page.find_all("script")  # the app's own files, none inline
    assert {s.get("src") for s in scripts} <= {f"/static/{name}" for name in OWN_SCRIPTS}
    assert not any(s.text.strip() for s in scripts)
    assert page.find_all("img") == []
    assert not any(name.startswith("on") for e in page.iter() for name in e.attrs)
    return html


@pytest.fixture
def marked(app, client) -> int:
    """A failed message with markup in every field a page shows, and a worker named in it."""
    to, cc, reply_to, sender = (str(Address(MARKUP, addr_spec=f"{n}@example.com"))
                                for n in ("to", "cc", "r", "shop"))  # fmt: skip
    body = {"to": [to], "cc": cc, "bcc": cc, "reply_to": reply_to, "from": sender,
            "subject": MARKUP, "text": MARKUP, "html": MARKUP,
            "headers": {"X-Note": MARKUP, SCRIPT: MARKUP},
            "attachments": [{"filename": f"{IMG}.txt", "content": b64(b"x"),
                             "content_type": "text/plain"}]}  # fmt: skip
    response = client.post(MESSAGES, json=body, headers=auth(tokens.create(MARKUP)))
    assert response.status_code == 201, response.get_json()
    message_id = response.get_json()["id"]
    now = utcnow()
    outcomes.failed(claim(message_id, MARKUP, now=now), now, 550, f"550 {MARKUP}")
    heartbeats.beat(MARKUP, now - timedelta(hours=1), 1, now=now)
    db.session.execute(sa.update(WorkerBeat).values(host=MARKUP))
    db.session.commit()
    return message_id


ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.mark.parametrize("path, fragment", [
    ("/", False), ("/messages", False), ("/messages?status=failed", False),
    ("/messages?q={q}", False), ("/messages/{id}", False), ("/messages", True),
    ("/messages/{id}", True),
])  # fmt: skip
def test_markup_in_every_field_shows_escaped(signed_in, marked, path, fragment):
    headers = {"HX-Request": "true"} if fragment else {}
    response = signed_in.get(path.format(id=marked, q=quote(SCRIPT)), headers=headers)
    assert response.status_code in (200, 286)
    assert ESCAPED in inert(response)


def test_message_page_shows_each_marked_field_as_text(signed_in, marked):
    page = parse(inert(signed_in.get(f"/messages/{marked}")))
    shown = facts(page.find_all("dl", class_="facts")[0])
    for term in ("From", "To", "Cc", "Bcc", "Reply-To"):
        assert SCRIPT in shown[term], term
    assert (shown["X-Note"], shown[SCRIPT]) == (MARKUP, MARKUP)
    assert shown["Created"].endswith(f"by api:{MARKUP}")
    assert page.find("h1").text == f"#{marked} {MARKUP}"
    assert page.find("title").text.startswith(f"#{marked} {MARKUP}")
    assert page.find("pre", class_="body").text == MARKUP
    assert page.find("ul", class_="attachments").find("a").text == f"{IMG}.txt"
    attempt = page.find("table", class_="attempts").find("tbody").find("tr")
    cells = {td["data-label"]: td.text for td in attempt.find_all("td")}
    assert (cells["Worker"], cells["Error"]) == (MARKUP, f"550 {MARKUP}")


def test_dashboard_shows_marked_worker_and_failure_as_text(signed_in, marked):
    page = parse(inert(signed_in.get("/")))
    workers = page.find_all("table")[-1].find("tbody").find("tr")
    assert [td.text for td in workers.find_all("td")][:2] == [MARKUP, MARKUP]
    assert f"550 {MARKUP}" in page.find("tr", id=f"failure-{marked}").text


def test_dashboard_resend_answers_its_row_escaped(signed_in, marked):
    response = signed_in.post(f"/failures/{marked}/resend", headers=htmx(signed_in))
    assert response.status_code == 200
    assert ESCAPED in inert(response)


def test_compose_shows_what_was_typed_back_escaped(signed_in):
    typed = dict.fromkeys(("sender", "to", "cc", "bcc", "reply_to", "subject", "text", "html",
                           "priority", "send_after"), MARKUP)  # fmt: skip
    response = signed_in.post("/messages/new", data={**typed, "csrf_token": csrf(signed_in)})
    assert response.status_code == 422
    page = parse(inert(response))
    for name in typed:
        assert shown_value(page.find(id=name)) == MARKUP, name
    assert "<img src=x onerror=alert(1)>" in field_box(page, "to").find("p", class_="error").text
    assert nothing_stored()


def test_sign_in_shows_what_was_typed_back_escaped(client, staff):
    response = client.post("/sign-in", data=sign_in_form(client, MARKUP, MARKUP))
    assert response.status_code == 401
    assert parse(inert(response)).find("input", name="email")["value"] == MARKUP


# Filled in for each route's URL; a route with another argument fails until it is added.
# Open by design: the probes answer anyone (they show no message), and /metrics has a
# bearer token of its own, refused without it in tests/e2e/test_metrics.py.
OPEN = {"static", "auth.sign_in", "health.healthz", "health.readyz", "metrics.scrape"}
# mailings: one-click unsubscribe takes a token signed per recipient instead,
# and refuses any other (tests/http/test_mailing_delivery.py).
OPEN |= {"unsubscribe.confirm", "unsubscribe.unsubscribe"}


def test_every_route_refuses_a_request_without_a_session_or_token(app, signed_in, make_message):
    upload = Upload("private.txt", "text/plain", b"Private")
    message = make_message(subject="Private", html="<p>Private</p>", attachments=[upload])
    attachment = db.session.scalars(sa.select(Attachment.id)).one()
    values = {"message_pk": message.id, "attachment_id": attachment, "address": "a@example.com"}
    values["bounce_pk"] = bounce_store.take_in(b"Subject: Private\r\n\r\nPrivate\r\n", "smtp")
    values |= {"endpoint_id": 1, "delivery_id": 1}  # webhooks: refused before a lookup
    values |= {"mailing_id": 1}  # mailings: refused before a lookup
    values |= {"captured_pk": 1, "index": 0}  # capture: refused before a lookup
    values |= {"domain": "example.com"}  # guardrails: refused before a lookup
    values |= {"job_id": 1}  # bulk jobs: refused before a lookup
    urls = app.url_map.bind("localhost")
    anonymous = app.test_client()
    token = csrf(anonymous, "/sign-in")
    before = snapshot()
    tried: list[str] = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in OPEN:
            continue
        assert rule.arguments <= values.keys(), f"{rule}: give {rule.arguments} a value"
        # OPTIONS is answered by Flask itself with the Allow header and nothing else.
        for method in sorted(rule.methods - {"OPTIONS"}):
            path = urls.build(rule.endpoint, {a: values[a] for a in rule.arguments})
            if rule.rule.startswith("/api/"):
                for client in (anonymous, signed_in):  # a staff session does not open it
                    response = client.open(path, method=method, json=VALID)
                    assert response.status_code == 401, (method, path)
                    assert response.headers["WWW-Authenticate"] == "Bearer"
            else:  # with a CSRF token, so that the sign-in check is what refuses
                response = anonymous.open(path, method=method, data={"csrf_token": token})
                assert response.status_code == 302, (method, path)
                assert sign_in_target(response.headers["Location"]) in (None, path)
            assert b"Private" not in response.data
            tried.append(rule.endpoint)
    assert {"api.create_message", "messages.download", "dashboard.index"} <= set(tried)
    assert snapshot() == before
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Message)) == 1


@pytest.fixture
def live(app: Flask) -> Iterator[int]:
    """The app behind Werkzeug's own server on a loopback port, so that it logs requests."""
    server = make_server("127.0.0.1", 0, app)
    serving = threading.Thread(target=server.serve_forever, name="hostile-live-server")
    serving.start()
    yield server.server_port
    server.shutdown()
    serving.join()
    server.server_close()


def call(port: int, method: str, path: str, body: bytes | None = None, **headers: str):  # type: ignore[no-untyped-def]
    """One request over HTTP: the status, the headers and the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def sign_in_over_http(port: int, email: str, password: str) -> int:
    status, headers, page = call(port, "GET", "/sign-in")
    cookie = headers["Set-Cookie"].split(";")[0]
    (token,) = {i["value"] for i in parse(page.decode()).find_all("input", name="csrf_token")}
    form = urlencode({"csrf_token": token, "email": email, "password": password}).encode()
    status, _, _ = call(port, "POST", "/sign-in", form, Cookie=cookie,
                        **{"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    return status


def every_row_as_text() -> str:
    """Every column of every row of every table, as text."""
    found = []
    with db.engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            for row in conn.execute(sa.text(f"SELECT * FROM {table}")):
                found += [v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in row]
    return "\n".join(found)


def test_tokens_and_passwords_are_never_logged_or_stored_in_clear(app, runner, live, caplog):
    for name in ["", "werkzeug", "sqlalchemy.engine", *logging.root.manager.loggerDict]:
        caplog.set_level(logging.DEBUG, logger=name)
    secrets = ["made by the CLI horse", "made by a prompt horse", "set by the CLI horse",
               "set in code horse", "a wrong horse guess"]  # fmt: skip
    result = runner.invoke(args=["create-token", "cli"])
    cli_token = result.output.strip().splitlines()[-1]
    created = runner.invoke(args=["create-user", "cli@example.com", "--password", secrets[0]])
    prompted = runner.invoke(args=["create-user", "p@example.com"],
                             input=f"{secrets[1]}\n{secrets[1]}\n")  # fmt: skip
    changed = runner.invoke(args=["set-password", "cli@example.com", "--password", secrets[2]])
    assert [r.exit_code for r in (result, created, prompted, changed)] == [0, 0, 0, 0]
    code_token = tokens.create("code")
    accounts.set_password("p@example.com", secrets[3])
    for token in (cli_token, code_token):
        json = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        status, headers, body = call(
            live, "POST", MESSAGES, b'{"to": "a@x.com", "text": "x"}', **json
        )
        assert status == 201, body
        assert call(live, "GET", headers["Location"], Authorization=f"Bearer {token}")[0] == 200
        assert call(live, "GET", headers["Location"], Authorization=f"Bearer {token}x")[0] == 401
    assert sign_in_over_http(live, "cli@example.com", secrets[2]) == 302
    assert sign_in_over_http(live, "p@example.com", secrets[4]) == 401
    assert sign_in_over_http(live, "p@example.com", secrets[3]) == 302

    logged = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert '"POST /sign-in HTTP/1.1" 302' in logged and "SELECT" in logged  # the logs were seen
    stored = every_row_as_text()
    assert tokens.digest(code_token) in stored  # the rows were seen
    for secret in [cli_token, code_token, *secrets]:
        assert secret not in logged, secret
        assert secret not in stored, secret


UNSTORABLE = ["\\u0000", "\\ud800", "\\udfff"]  # as JSON escapes: NUL and lone surrogates
JSON_FIELDS = {**{f: f'"{v}{{}}"' for f, v in FIELDS.items()}, "text": '"Hi{}"',
               "html": '"<p>{}</p>"', "headers": '{{"X-Tag": "a{}"}}',
               "attachments": '[{{"filename": "a{}.txt", "content": "aGk="}}]'}  # fmt: skip


@pytest.mark.parametrize("field", JSON_FIELDS)
def test_nul_or_lone_surrogate_in_any_field_is_422_naming_it(client, token, field):
    """PostgreSQL cannot store NUL in text; nothing can encode a lone surrogate."""
    for char in UNSTORABLE:
        fields = {"to": '"rcpt@example.com"', "text": '"Hi"', field: JSON_FIELDS[field]}
        body = "{" + ", ".join(f'"{k}": {v.format(char)}' for k, v in fields.items()) + "}"
        response = client.post(MESSAGES, data=body, content_type="application/json",
                               headers=auth(token))  # fmt: skip
        assert response.status_code == 422, body
        assert set(response.get_json()["errors"]) == {field}, body
    assert nothing_stored()


def test_nul_in_a_form_file_name_or_compose_field_is_422(client, token, signed_in):
    data, content_type = multipart({"to": "rcpt@example.com", "text": "Hi"}, "a\0.txt")
    response = client.post(MESSAGES, data=data, content_type=content_type, headers=auth(token))
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == {"attachments"}
    form = {"to": "rcpt@example.com", "text": "Hi", "subject": "a\0b"}
    response = client.post(MESSAGES, data=form, headers=auth(token))
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == {"subject"}
    response = signed_in.post("/messages/new", data={**form, "csrf_token": csrf(signed_in)})
    assert response.status_code == 422
    assert field_box(parse(response), "subject").find("p", class_="error").text
    assert nothing_stored()


def test_json_nested_past_the_decoder_or_with_a_bad_content_type_is_refused(client, token):
    deep = "[" * 100_000 + "]" * 100_000
    response = client.post(MESSAGES, data=deep, content_type="application/json",
                           headers=auth(token))  # fmt: skip
    assert response.status_code == 400 and set(response.get_json()["errors"]) == {"body"}
    for content_type in (5, ["text/plain"], {"a": 1}):
        attachment = {"filename": "a.txt", "content": "aGk=", "content_type": content_type}
        response = client.post(MESSAGES, json={**VALID, "attachments": [attachment]},
                               headers=auth(token))  # fmt: skip
        assert response.status_code == 422
        assert set(response.get_json()["errors"]) == {"attachments"}
    assert nothing_stored()


def test_a_whole_number_written_as_a_json_float_is_a_priority(client, token):
    """JSON has one kind of number, and JSON Schema calls 5.0 an integer."""
    response = client.post(MESSAGES, json={**VALID, "priority": 5.0}, headers=auth(token))
    assert response.status_code == 201 and response.get_json()["priority"] == 5


@pytest.mark.parametrize("path, method, code", [
    ("/api/nothing", "GET", 404), ("/api/messages/x", "GET", 404), ("/api/messages/-1", "GET", 404),
    ("/api/messages", "PUT", 405), ("/api/messages/1", "POST", 405),
])  # fmt: skip
def test_api_urls_no_route_takes_are_answered_in_json(client, token, path, method, code):
    response = client.open(path, method=method, headers=auth(token))
    assert response.status_code == code and response.is_json
    assert response.get_json()["error"]
    if code == 405:
        assert "Allow" in response.headers


@pytest.mark.all_databases
@pytest.mark.parametrize("path, code", [
    ("/messages?before=" + str(10**30), 400), ("/messages?before=-" + str(10**30), 400),
    ("/messages?before=0", 400), ("/messages?q=" + "x" * 60_000, 400), ("/messages?q=a%00", 400),
    ("/messages/{id}/attachments/" + str(2**63), 404),
    ("/messages/{id}/attachments/" + str(2**64), 404),
])  # fmt: skip
def test_hostile_page_parameters_are_refused_not_errors(signed_in, make_message, path, code):
    message = make_message()
    assert signed_in.get(path.format(id=message.id)).status_code == code
