"""The routes page in a real Chromium: a worker sends over OUTBOX_ROUTES, the pages name routes."""

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from flask_migrate import upgrade
from playwright.sync_api import expect
from werkzeug.serving import make_server

from outbox import create_app
from outbox.auth import accounts
from outbox.capabilities.routes import health
from outbox.models import utcnow
from outbox.models.db import dispose_engines
from tests.support import processes
from tests.support.browser import (
    LIVE,
    SCREENSHOTS,
    SENDER,
    STAFF,
    QuietHandler,
    Site,
    _wait_for_heartbeat,
    enqueue,
    fits,
    received,
    staff_tab,
)
from tests.support.smtpd import SmtpServer, free_port

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]

ROUTES = """
[[routes]]
name = "primary"
host = "127.0.0.1"
port = {dead}
tls = "none"

[[routes]]
name = "relay"
host = "127.0.0.1"
port = {smtp}
tls = "none"
max_connections = 2
rate = 40

[[rules]]
recipient_domain = "example.com"
route = "primary"
fallback = ["relay"]

[domains."gmail.com"]
rate = 20
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A live web server and a worker, both on a routes file whose first route is down."""
    tmp = tmp_path_factory.mktemp("routes-browser")
    smtp = SmtpServer().start()
    (tmp / "routes.toml").write_text(ROUTES.format(dead=free_port(), smtp=smtp.port))
    url = f"sqlite:///{tmp / 'outbox.sqlite3'}"
    os.environ["OUTBOX_INSTANCE_PATH"] = str(tmp)  # the relative ROUTES is taken there
    try:
        app = create_app({"DATABASE_URL": url, "SECRET_KEY": "browser-test",
                          "ROUTES": "routes.toml", "MAIL_DEFAULT_SENDER": SENDER,
                          "POLL_INTERVAL": 1.0})  # fmt: skip
    finally:
        del os.environ["OUTBOX_INSTANCE_PATH"]
    with app.app_context():
        upgrade()
        accounts.create_user(*STAFF)
    server = make_server("127.0.0.1", free_port(), app, threaded=True, request_handler=QuietHandler)
    serving = threading.Thread(target=server.serve_forever, name="live-server")
    serving.start()
    env = dict(os.environ, OUTBOX_DATABASE_URL=url, OUTBOX_INSTANCE_PATH=str(tmp),
               OUTBOX_ROUTES="routes.toml", OUTBOX_MAIL_DEFAULT_SENDER=SENDER,
               OUTBOX_POLL_INTERVAL="1", OUTBOX_RETRY_DELAY="1")  # fmt: skip
    log_path = tmp / "worker.log"
    log = log_path.open("w")
    worker = processes.start([sys.executable, "-m", "outbox", "worker"], env=env,
                             stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        _wait_for_heartbeat(app, worker)
        yield Site(f"http://127.0.0.1:{server.port}", app, smtp)
    finally:
        processes.end(worker, signal.SIGTERM, timeout=15)
        log.close()
        server.shutdown()
        serving.join()
        server.server_close()
        smtp.stop()
        with app.app_context():
            dispose_engines()
    assert worker.returncode == 0, f"the worker did not stop cleanly:\n{log_path.read_text()}"


@pytest.mark.parametrize("width", (390, 1280))
def test_a_mail_that_went_by_the_fallback_names_it_and_the_routes_page_shows_health(
    browser, site, console, width
):
    pk = enqueue(site, f"ann-{width}@example.com", f"Routed {width}")
    with site.app.app_context():  # as the worker notes it (routes.health.note)
        health.forget()
        health.note("primary", False, "cannot connect to 127.0.0.1: Connection refused", utcnow())
        health.note("relay", True, None, utcnow())
    with staff_tab(browser, site, console, width) as page:
        page.goto(f"/messages/{pk}")
        expect(page.locator("#state .status").first).to_have_text("sent", timeout=LIVE)
        routes_named = page.locator("#state table.attempts td[data-label='Route']")
        expect(routes_named.last).to_have_text("relay")
        routes_named.last.get_by_role("link", name="relay").click()
        expect(page.get_by_role("heading", name="Routes", exact=True)).to_be_visible()
        expect(page.locator('nav a[aria-current="page"]')).to_have_text("Routes")
        primary = page.locator("tr#route-primary")
        expect(primary).to_contain_text("(default)")
        expect(primary.locator(".status")).to_have_text("failing")
        expect(primary).to_contain_text("Connection refused")
        relay = page.locator("tr#route-relay")
        expect(relay.locator(".status")).to_have_text("up")
        expect(relay).to_contain_text("40 a second")
        rule = page.locator("table.rules tbody tr").first
        expect(rule).to_contain_text("every recipient at example.com")
        expect(rule).to_contain_text("primary, then relay")
        expect(page.locator("table.domains")).to_contain_text("gmail.com")
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"routes-{width}.png", full_page=True)
    assert received(site, f"Routed {width}")["To"] == f"ann-{width}@example.com"
