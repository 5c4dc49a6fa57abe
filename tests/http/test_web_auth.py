"""Staff pages: who may see them, signing in and out, CSRF, and the security headers."""

import hashlib
from datetime import datetime, timedelta
from urllib.parse import urlencode, urljoin, urlsplit

import pytest
from sqlalchemy import func, select

from outbox.auth import accounts
from outbox.core.checks import Upload
from outbox.core.status import Status
from outbox.models import Attachment, Message, User
from outbox.models.db import db
from tests.support.pages import PASSWORD, csrf, htmx, move_to, parse, sign_in_form, sign_in_target
from tests.support.rows import snapshot


@pytest.fixture
def message(make_message) -> Message:
    attachment = Upload("secret.txt", "text/plain", b"attachment bytes")
    return make_message(html="<p>Hi</p>", attachments=[attachment])


@pytest.fixture
def movable(make_message) -> dict[Status, int]:
    """A message in each status some button moves it out of."""
    made = {status: make_message(subject=status.value) for status in
            (Status.QUEUED, Status.DEFERRED, Status.SENT, Status.FAILED)}  # fmt: skip
    return {status: move_to(message, status) for status, message in made.items()}


def signed_in_now(client) -> bool:
    response = client.get("/")
    assert response.status_code in (200, 302)
    return response.status_code == 200


def attachment_id(message_pk: int) -> int:
    found = select(Attachment.id).where(Attachment.message_pk == message_pk)
    return db.session.execute(found).scalar_one()


PAGES = ["/", "/messages", "/messages?status=failed&q=ann", "/messages/new", "/messages/{id}",
         "/messages/{id}/body.html", "/messages/{id}/attachments/{attachment}"]  # fmt: skip
ACTIONS = [("resend", Status.FAILED), ("cancel", Status.QUEUED),
           ("send-now", Status.DEFERRED), ("send-again", Status.SENT)]  # fmt: skip


@pytest.mark.parametrize("path", PAGES)
def test_every_page_sends_a_visitor_without_a_session_to_sign_in(client, message, path):
    path = path.format(id=message.id, attachment=attachment_id(message.id))
    response = client.get(path)
    assert response.status_code == 302
    assert sign_in_target(response.headers["Location"]) == path
    assert b"attachment bytes" not in response.data and b"<p>Hi</p>" not in response.data


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_htmx_without_a_session_with_401_and_hx_redirect(client, message, path):
    path = path.format(id=message.id, attachment=attachment_id(message.id))
    response = client.get(path, headers={"HX-Request": "true"})
    assert response.status_code == 401
    assert sign_in_target(response.headers["HX-Redirect"]) == path
    assert response.data == b""


@pytest.mark.parametrize("via_htmx", [False, True])
@pytest.mark.parametrize("action, status", ACTIONS)
def test_every_button_without_a_session_sends_to_sign_in_and_changes_nothing(
    client, movable, action, status, via_htmx
):
    before = snapshot()
    path = f"/messages/{movable[status]}/{action}"
    token = csrf(client, "/sign-in")
    if via_htmx:
        response = client.post(path, headers={"HX-Request": "true", "X-CSRFToken": token})
        assert response.status_code == 401
        # Only a page can be returned to after signing in; a POST URL cannot.
        assert sign_in_target(response.headers["HX-Redirect"]) is None
    else:
        response = client.post(path, data={"csrf_token": token})
        assert response.status_code == 302
        assert sign_in_target(response.headers["Location"]) is None
    assert snapshot() == before


def test_resend_all_and_compose_without_a_session_send_to_sign_in_and_change_nothing(
    client, movable
):
    before = snapshot()
    token = csrf(client, "/sign-in")
    resend_all = client.post("/messages/resend-failed", data={"csrf_token": token, "confirm": "y"})
    compose = client.post("/messages/new", data={"csrf_token": token, "to": "a@example.com",
                                                 "subject": "Hi", "text": "Hello"})  # fmt: skip
    assert sign_in_target(resend_all.headers["Location"]) is None
    assert sign_in_target(compose.headers["Location"]) is None
    assert snapshot() == before


def test_a_session_does_not_open_the_api(signed_in, movable):
    before = snapshot()
    queued = movable[Status.QUEUED]
    answers = [
        signed_in.get(f"/api/messages/{queued}"),
        signed_in.post(f"/api/messages/{queued}/cancel"),
        signed_in.post("/api/messages", json={"to": ["a@example.com"], "text": "Hi"}),
    ]
    assert signed_in_now(signed_in)
    for response in answers:
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert snapshot() == before


def test_right_password_signs_in_and_goes_back_to_the_page_asked_for(client, staff):
    asked = client.get("/messages?status=failed&q=ann")
    sign_in_page = asked.headers["Location"]
    response = client.post(sign_in_page, data=sign_in_form(client))
    assert response.status_code == 302
    assert response.headers["Location"] == "/messages?status=failed&q=ann"
    assert client.get(response.headers["Location"]).status_code == 200
    assert fresh_user().last_sign_in_at is not None


def fresh_user() -> User:
    db.session.expire_all()
    return db.session.execute(select(User)).scalar_one()


@pytest.mark.parametrize(
    "target, location",
    [(None, "/"), ("", "/"), ("https://evil.example/", "/"), ("//evil.example", "/"),
     ("//evil.example/messages", "/"), ("http:/evil.example", "/"), ("evil.example", "/"),
     ("javascript:alert(1)", "/"), ("/\t/evil.example", "/"),
     # Browsers read "/\\host" as "//host": refused like it (web.links.local_path).
     ("/\\evil.example", "/")],
)  # fmt: skip
def test_sign_in_goes_to_the_dashboard_unless_next_is_a_local_path(client, staff, target, location):
    path = "/sign-in" if target is None else "/sign-in?" + urlencode({"next": target})
    response = client.post(path, data=sign_in_form(client))
    assert response.status_code == 302
    assert response.headers["Location"] == location
    as_browsers_read_it = urljoin("http://localhost/sign-in", location.replace("\\", "/"))
    assert urlsplit(as_browsers_read_it).netloc == "localhost"
    assert signed_in_now(client)


@pytest.mark.parametrize(
    "email, password",
    [("staff@example.com", "wrong horse"), ("nobody@example.com", PASSWORD),
     ("staff@example.com", PASSWORD.upper())],
)  # fmt: skip
def test_wrong_email_or_password_is_401_and_signs_nobody_in(client, staff, email, password):
    response = client.post("/sign-in", data=sign_in_form(client, email, password))
    assert response.status_code == 401
    assert "Wrong email or password." in parse(response).find(role="alert").text
    assert parse(response).find("input", name="email")["value"] == email
    assert not signed_in_now(client)


def test_sixth_try_after_five_failures_is_429_even_with_the_right_password(app, client, staff):
    for _ in range(accounts.FAILURE_LIMIT):
        wrong = client.post("/sign-in", data=sign_in_form(client, password="wrong horse"))
        assert wrong.status_code == 401
    response = client.post("/sign-in", data=sign_in_form(client))
    assert response.status_code == 429
    alert = parse(response).find(role="alert").text
    assert "Too many failed sign-ins" in alert and "try again in 15 minutes" in alert
    assert 890 <= int(response.headers["Retry-After"]) <= 900
    assert not signed_in_now(client)
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "192.0.2.7"
    assert elsewhere.post("/sign-in", data=sign_in_form(elsewhere)).status_code == 302


def test_an_address_locked_out_signs_in_again_once_unlocked(app, client, runner, staff):
    for _ in range(accounts.FAILURE_LIMIT):
        client.post("/sign-in", data=sign_in_form(client, password="wrong horse"))
    assert client.post("/sign-in", data=sign_in_form(client)).status_code == 429
    result = runner.invoke(args=["unlock", "127.0.0.1"])  # the test client's address
    assert result.output.startswith("lifted the lockout of 127.0.0.1 (5 failed"), result.output
    assert client.post("/sign-in", data=sign_in_form(client)).status_code == 302
    assert signed_in_now(client)


MINUTE = timedelta(minutes=1)


def fail(times: int, start: datetime, address: str = "192.0.2.1") -> None:
    """Wrong passwords from address, a minute apart from start."""
    for n in range(times):
        moment = start + n * MINUTE
        assert accounts.sign_in("staff@example.com", "wrong", address, now=moment) is None


@pytest.mark.all_databases
def test_failures_lock_an_address_out_only_within_15_minutes(staff):
    start = datetime(2030, 1, 1, 12, 0)
    fail(5, start)  # at 12:00 ... 12:04
    with pytest.raises(accounts.TooManyFailures) as refused:
        accounts.sign_in("staff@example.com", PASSWORD, "192.0.2.1", now=start + 10 * MINUTE)
    assert refused.value.retry_after == 5 * 60
    assert "try again in 5 minutes" in str(refused.value)
    other = accounts.sign_in("staff@example.com", PASSWORD, "192.0.2.2", now=start + 10 * MINUTE)
    assert other is not None
    # At 12:15 the 12:00 failure has left the window: four remain, one try is allowed.
    later = start + 15 * MINUTE + timedelta(seconds=1)
    assert accounts.sign_in("staff@example.com", PASSWORD, "192.0.2.1", now=later) is not None


@pytest.mark.all_databases
def test_a_success_clears_its_accounts_failures_never_its_addresses(staff):
    # An insider with an account of their own guesses a colleague's password.
    accounts.create_user("viewer@example.com", "viewer's own password", "viewer")
    start = datetime(2030, 1, 1, 12, 0)
    fail(4, start)
    now = start + 5 * MINUTE
    assert accounts.sign_in("viewer@example.com", "viewer's own password", "192.0.2.1", now=now)
    fail(1, start + 6 * MINUTE)  # the fifth failure from this address ...
    with pytest.raises(accounts.TooManyFailures) as refused:  # ... is its last
        accounts.sign_in("viewer@example.com", "viewer's own password", "192.0.2.1",
                         now=start + 7 * MINUTE)  # fmt: skip
    assert refused.value.whose == "from your address"


@pytest.mark.all_databases
def test_an_account_tried_from_many_addresses_is_locked_out_everywhere(staff):
    start = datetime(2030, 1, 1, 12, 0)
    clients = [f"192.0.2.{n}" for n in range(10, 30)]
    limit, per_client = accounts.ACCOUNT_FAILURE_LIMIT, accounts.FAILURE_LIMIT
    for n in range(limit // per_client):  # one short of the account's limit
        fail(per_client - (n == 0), start, address=clients.pop())
    # The account's own success clears its count, gathered from wherever.
    assert accounts.sign_in("staff@example.com", PASSWORD, "198.51.100.1", now=start + 5 * MINUTE)
    for _ in range(limit // per_client):
        fail(per_client, start + 6 * MINUTE, address=clients.pop())
    with pytest.raises(accounts.TooManyFailures) as refused:
        accounts.sign_in("Staff@Example.com", PASSWORD, "198.51.100.1", now=start + 12 * MINUTE)
    assert refused.value.whose == "at this account"
    assert refused.value.retry_after == 9 * 60
    assert accounts.lockouts(start + 12 * MINUTE)["staff@example.com"] == limit
    # Another account is let in from the same address.
    accounts.create_user("viewer@example.com", "viewer's own password", "viewer")
    assert accounts.sign_in("viewer@example.com", "viewer's own password", "198.51.100.1",
                            now=start + 12 * MINUTE)  # fmt: skip
    assert (
        accounts.unlock_account("staff@example.com", start + 12 * MINUTE)["staff@example.com"]
        == limit
    )
    assert accounts.sign_in("staff@example.com", PASSWORD, "198.51.100.1", now=start + 12 * MINUTE)


def test_an_ipv6_client_is_counted_by_its_64_however_it_is_spelled(staff):
    start = datetime(2030, 1, 1, 12, 0)
    for n in range(accounts.FAILURE_LIMIT):
        fail(1, start + n * MINUTE, address=f"2001:DB8:0:0:{n}::1")
    for other in ("2001:db8::ffff", "2001:0db8:0000:0000:ffff:ffff:ffff:ffff"):
        with pytest.raises(accounts.TooManyFailures):
            accounts.sign_in("staff@example.com", PASSWORD, other, now=start + 6 * MINUTE)
    next_64 = accounts.sign_in("staff@example.com", PASSWORD, "2001:db8:0:1::1",
                               now=start + 6 * MINUTE)  # fmt: skip
    assert next_64 is not None
    assert accounts.lockouts(start + 6 * MINUTE) == {"2001:db8::/64": 5}


def test_a_known_and_an_unknown_account_each_cost_one_password_hash(staff, monkeypatch):
    hashes = []
    scrypt = hashlib.scrypt
    monkeypatch.setattr(hashlib, "scrypt", lambda *a, **k: hashes.append(1) or scrypt(*a, **k))
    accounts.sign_in("nobody@example.com", PASSWORD, "192.0.2.1")  # the decoy, made once
    hashes.clear()
    for email in ("nobody@example.com", "staff@example.com", "nobody@example.com"):
        accounts.sign_in(email, "wrong horse", "192.0.2.1")
    assert len(hashes) == 3


def test_sign_out_is_a_post_and_ends_the_session(signed_in):
    assert signed_in.get("/sign-out").status_code == 405
    assert signed_in_now(signed_in)
    response = signed_in.post("/sign-out", data={"csrf_token": csrf(signed_in, "/")})
    assert response.status_code == 302 and response.headers["Location"] == "/sign-in"
    assert not signed_in_now(signed_in)
    assert sign_in_target(signed_in.get("/messages").headers["Location"]) == "/messages"


def test_a_new_password_ends_existing_sessions(app, signed_in):
    assert signed_in_now(signed_in)
    accounts.set_password("staff@example.com", "battery staple")
    assert not signed_in_now(signed_in)
    client = app.test_client()
    old = client.post("/sign-in", data=sign_in_form(client))
    assert old.status_code == 401
    new = client.post("/sign-in", data=sign_in_form(client, password="battery staple"))
    assert new.status_code == 302 and signed_in_now(client)


def test_sign_in_without_csrf_token_is_400(app, client, staff):
    assert app.config["TESTING"] and app.config.get("WTF_CSRF_ENABLED", True)
    form = sign_in_form(client)
    del form["csrf_token"]
    response = client.post("/sign-in", data=form)
    assert response.status_code == 400
    assert not signed_in_now(client)
    assert fresh_user().last_sign_in_at is None


def test_sign_out_without_csrf_token_is_400_and_keeps_the_session(signed_in):
    assert signed_in.post("/sign-out").status_code == 400
    assert signed_in_now(signed_in)


@pytest.mark.parametrize("via_htmx", [False, True])
@pytest.mark.parametrize("action, status", ACTIONS)
def test_button_without_csrf_token_is_400_and_with_the_page_token_works(
    app, signed_in, movable, action, status, via_htmx
):
    path = f"/messages/{movable[status]}/{action}"
    before = snapshot()
    headers = {"HX-Request": "true"} if via_htmx else {}
    assert signed_in.post(path, headers=headers).status_code == 400
    other = app.test_client()  # a token from someone else's session is no better
    foreign = csrf(other, "/sign-in")
    assert signed_in.post(path, data={"csrf_token": foreign}).status_code == 400
    assert signed_in.post(path, headers={**headers, "X-CSRFToken": foreign}).status_code == 400
    assert snapshot() == before
    if via_htmx:
        headers = htmx(signed_in, f"/messages/{movable[status]}")
        response = signed_in.post(path, headers=headers, data={"confirmed": "yes"})
        assert response.status_code in (200, 204)
    else:
        data = {"csrf_token": csrf(signed_in, "/"), "confirmed": "yes"}
        response = signed_in.post(path, data=data)
        assert response.status_code == 302
    assert snapshot() != before


def test_compose_and_resend_all_without_csrf_token_are_400_and_change_nothing(signed_in, movable):
    before = snapshot()
    compose = {"to": "a@example.com", "subject": "Hi", "text": "Hello"}
    assert signed_in.post("/messages/new", data=compose).status_code == 400
    confirm = {"confirm": "y"}
    assert signed_in.post("/messages/resend-failed", data=confirm).status_code == 400
    assert snapshot() == before
    token = csrf(signed_in)
    assert signed_in.post("/messages/new", data={**compose, "csrf_token": token}).status_code == 302
    done = signed_in.post("/messages/resend-failed", data={**confirm, "csrf_token": token})
    assert done.status_code == 302 and done.headers["Location"] == "/"
    assert db.session.scalar(select(func.count()).select_from(Message)) == len(before) + 1


def policy(response) -> dict[str, list[str]]:
    """A Content-Security-Policy header as directive -> sources."""
    found = {}
    for directive in response.headers["Content-Security-Policy"].split(";"):
        name, *sources = directive.split()
        found[name] = sources
    return found


@pytest.mark.parametrize("path", ["/sign-in", "/", "/messages", "/messages/new", "/messages/{id}"])
def test_pages_run_only_their_own_scripts_and_styles(signed_in, message, path):
    response = signed_in.get(path.format(id=message.id))
    assert response.status_code == 200
    rules = policy(response)
    assert rules["script-src"] == ["'self'"] and rules["style-src"] == ["'self'"]
    assert rules["default-src"] == ["'self'"] and rules["object-src"] == ["'none'"]
    assert "'unsafe-inline'" not in response.headers["Content-Security-Policy"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    # ... and need nothing else: no inline script, style or event handler.
    page = parse(response)
    assert all(script.get("src", "").startswith("/static/") for script in page.find_all("script"))
    assert page.find_all("style") == []
    for element in page.iter():
        assert not any(name == "style" or name.startswith("on") for name in element.attrs)


def test_html_body_is_served_alone_in_a_sandbox_that_allows_nothing(signed_in, make_message):
    html = '<p>Hi</p><script>alert(1)</script><img src="https://tracker.example/p.gif">'
    message = make_message(html=html)
    response = signed_in.get(f"/messages/{message.id}/body.html")
    assert response.status_code == 200 and response.mimetype == "text/html"
    # Served as stored, but for its remote loads, renamed away (web.shown.without_remote):
    # the policy would block them anyway, with an error in the console for each.
    assert response.get_data(as_text=True) == html.replace(" src=", " data-blocked-src=")
    header = response.headers["Content-Security-Policy"]
    assert header.startswith("sandbox;")
    rules = policy(response)
    assert rules["sandbox"] == [] and rules["default-src"] == ["'none'"]
    assert "script-src" not in rules and rules["img-src"] == ["data:"]


def test_message_page_shows_the_html_body_only_inside_a_sandboxed_iframe(signed_in, make_message):
    message = make_message(html="<p class='from-mail'>Rich <b>text</b></p>")
    response = signed_in.get(f"/messages/{message.id}")
    page = parse(response)
    frame = page.find("iframe")
    assert "sandbox" in frame.attrs and frame["sandbox"] == ""  # no allow-* token
    assert frame["src"] == f"/messages/{message.id}/body.html"
    assert page.find_all(class_="from-mail") == [] and b"<b>text</b>" not in response.data


def cookie(response, name: str = "session") -> dict[str, str]:
    """The attributes of a Set-Cookie header, names lower-cased."""
    for header in response.headers.getlist("Set-Cookie"):
        first, *attributes = header.split(";")
        if first.split("=", 1)[0].strip() == name:
            pairs = (a.strip().partition("=") for a in attributes)
            return {key.lower(): value for key, _, value in pairs}
    raise AssertionError(f"no {name} cookie set")


def test_session_cookie_is_httponly_and_samesite_lax_and_not_secure_over_http(client, staff):
    form = sign_in_form(client)
    response = client.post("/sign-in", data=form)
    assert response.status_code == 302
    attributes = cookie(response)
    assert "httponly" in attributes and attributes["samesite"] == "Lax"
    assert "secure" not in attributes


def test_session_cookie_is_secure_over_https(app, staff):
    client = app.test_client()
    page = client.get("/sign-in", base_url="https://localhost")
    assert "secure" in cookie(page)
    token = parse(page).find("input", name="csrf_token")["value"]
    form = {"csrf_token": token, "email": "staff@example.com", "password": PASSWORD}
    response = client.post("/sign-in", data=form, base_url="https://localhost",
                           headers={"Referer": "https://localhost/sign-in"})  # fmt: skip
    assert response.status_code == 302
    attributes = cookie(response)
    assert "secure" in attributes and "httponly" in attributes
    assert attributes["samesite"] == "Lax"
