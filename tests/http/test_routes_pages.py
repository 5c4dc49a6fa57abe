"""The routes page, the route of each attempt on a message's page, and `outbox check` per route."""

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask

from outbox import queue
from outbox.capabilities.routes import config as routes_file
from outbox.capabilities.routes import health
from outbox.core.status import Outcome
from outbox.models import utcnow
from outbox.models.db import db
from tests.support.checks import check, line
from tests.support.smtpd import free_port

FILE = """
[[routes]]
name = "relay"
host = "127.0.0.1"
port = {relay}
tls = "none"
max_connections = 4
rate = 50

[[routes]]
name = "backup"
host = "127.0.0.1"
port = {backup}
tls = "none"

[[routes]]
name = "secure"
host = "127.0.0.1"
port = {secure}
tls = "ssl"
username = "outbox"
password = "never-shown"
tls_verify = false

[[rules]]
recipient_domain = "bücher.example"
route = "backup"
fallback = ["relay"]

[[rules]]
min_priority = 5
sender_domain = "shop.example"
route = "relay"
fallback = ["secure", "backup"]

[domains."gmail.com"]
rate = 20
"""


def with_routes(app: Flask, tmp_path: Path, relay: int, backup: int, secure: int = 465) -> Flask:
    """The app as create_app makes it with OUTBOX_ROUTES set (the file read once)."""
    path = tmp_path / "routes.toml"
    path.write_text(FILE.format(relay=relay, backup=backup, secure=secure), encoding="utf-8")
    app.config["ROUTES"] = str(path)
    routes_file.init_app(app)
    return app


@pytest.fixture(autouse=True)
def fresh_process():
    health.forget()
    yield
    health.forget()


def test_the_page_shows_each_route_its_health_the_rules_and_the_limits(
    app, tmp_path, signed_in, staff
):
    with_routes(app, tmp_path, 2525, 2526)
    staff.role = "viewer"  # reading it needs no more
    db.session.commit()
    now = utcnow()
    health.note("relay", True, None, now - timedelta(minutes=3))
    health.note("backup", False, "cannot connect to 127.0.0.1:2526: Connection refused",
                now - timedelta(minutes=5))  # fmt: skip
    page = signed_in.get("/routes")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert '<a href="/routes" aria-current="page">Routes</a>' in html
    relay = section(html, 'id="route-relay"', "</tr>")
    assert "127.0.0.1:2525" in relay and ">none<" in relay and "(default)" in relay
    assert "4 <small" in relay and "50 a second" in relay
    assert ">up</span> last sent <time" in relay and "3 min ago" in relay
    backup = section(html, 'id="route-backup"', "</tr>")
    assert ">failing</span> since <time" in backup and "5 min ago" in backup
    assert "1 fault" in backup and "Connection refused" in backup and "no limit" in backup
    secure = section(html, 'id="route-secure"', "</tr>")
    assert "127.0.0.1:465" in secure and "TLS <span" in secure
    assert "certificate not checked" in secure and ">outbox<" in secure
    assert ">not used yet<" in secure
    assert "never-shown" not in html
    rules = section(html, 'class="list stacked rules"', "</table>")
    assert "every recipient at xn--bcher-kva.example" in rules
    assert "from shop.example, priority 5 or more" in rules
    assert ('<a href="#route-relay">relay</a>, then <a href="#route-secure">secure</a>, then '
            '<a href="#route-backup">backup</a>') in rules  # fmt: skip
    assert "no rule matches" in rules
    assert "gmail.com" in section(html, 'class="list stacked domains"', "</table>")


def test_without_a_file_the_page_shows_the_mail_settings_route(signed_in):
    html = signed_in.get("/routes").get_data(as_text=True)
    assert "no OUTBOX_ROUTES file is set" in html
    assert "127.0.0.1:1" in section(html, 'id="route-default"', "</tr>")
    assert "every message (no rules)" in html
    assert "None: no domain is held to a rate of its own." in html


def test_the_page_needs_a_signed_in_person(client):
    answer = client.get("/routes")
    assert answer.status_code == 302 and "/sign-in" in answer.headers["Location"]


def test_a_messages_page_names_the_route_of_each_attempt(app, signed_in, make_message):
    message = make_message()
    (claim,) = queue.claim_batch("w1", 10)
    queue.record([queue.Finished(claim, Outcome.SENT, datetime.now(), route="backup")])
    html = signed_in.get(f"/messages/{message.id}").get_data(as_text=True)
    assert "<th>Route</th>" in html
    assert '<td data-label="Route"><a href="/routes#route-backup">backup</a></td>' in html


def test_check_connects_to_every_route_and_names_the_one_that_fails(app, runner, smtp, tmp_path):
    dead = free_port()
    with_routes(app, tmp_path, smtp.port, dead, free_port())
    app.config["MAIL_PORT"] = dead  # not checked: the routes are what the workers use
    code, output = check(runner)
    assert code == 1, output
    assert line(output, "smtp relay") == (f"ok    smtp relay 127.0.0.1:{smtp.port}: EHLO answered, "
                                          "no TLS, no AUTH; nothing was sent")  # fmt: skip
    found = line(output, "smtp backup")
    assert found.startswith(f"FAIL  smtp backup cannot connect to 127.0.0.1:{dead}")
    assert 'fix: in route "backup" of OUTBOX_ROUTES: check host and port' in found
    assert line(output, "smtp secure").startswith("FAIL  smtp secure ")
    assert " smtp " not in output.replace("smtp relay", "").replace("smtp backup", "").replace(
        "smtp secure", "")  # fmt: skip
    assert smtp.received == []


def section(html: str, start: str, end: str) -> str:
    """The part of the page from start to the first end after it."""
    begin = html.index(start)
    return html[begin : html.index(end, begin)]
