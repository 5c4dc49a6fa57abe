"""The staff pages in a real Chromium against a live server, a real worker and SMTP server."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest
from flask import Flask
from flask_migrate import upgrade
from sqlalchemy import func, select
from werkzeug.serving import WSGIRequestHandler, make_server

from outbox import accounts, create_app, reports
from outbox.extensions import db, dispose_engines
from outbox.models import WorkerBeat

from . import processes
from .smtpd import SmtpServer, free_port


def unavailable(reason: str) -> NoReturn:
    """Skip the browser tests, or fail them under CI, where the browser must be there."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    from playwright.sync_api import (
        Browser,
        ConsoleMessage,
        Page,
        Response,
        expect,
        sync_playwright,
    )
except ImportError:
    unavailable("the playwright package is not installed (pip install playwright)")

pytestmark = pytest.mark.browser

# Debian's Chromium, never a browser Playwright downloads.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
SCREENSHOTS = Path(__file__).parent / "screenshots"
STAFF = ("staff@example.com", "correct horse battery")
SENDER = "outbox@example.com"
LIVE = 15_000  # milliseconds to wait for something the worker and htmx polling bring
IN_FLIGHT = re.compile(r"^(queued|sending)$")


class QuietHandler(WSGIRequestHandler):
    """Werkzeug's handler without a log line per request (htmx polls every second)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@dataclass
class Site:
    url: str
    app: Flask
    smtp: SmtpServer


@pytest.fixture(scope="module", autouse=True)
def chromium() -> Path:
    """Checked first, so that nothing is started for tests that cannot run."""
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium); no browser is downloaded")
    return CHROMIUM


def _wait_for_heartbeat(app: Flask, worker: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Until the worker's first tick: its stop handlers are in place from then on.

    A module of one quick test would otherwise stop a worker still importing, which
    SIGTERM kills outright (exit -15) instead of stopping it cleanly.
    """
    deadline = time.monotonic() + 60
    with app.app_context():
        while not db.session.scalar(select(func.count()).select_from(WorkerBeat)):
            db.session.rollback()
            assert worker.poll() is None, "the worker exited before its first tick"
            assert time.monotonic() < deadline, "the worker did not tick within 60 s"
            time.sleep(0.1)
        db.session.rollback()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Migrated SQLite file, live web server, SMTP server, a worker process, a staff account."""
    tmp = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{tmp / 'outbox.sqlite3'}"
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "browser-test",
                      "MAIL_DEFAULT_SENDER": SENDER, "POLL_INTERVAL": 1.0})  # fmt: skip
    app.instance_path = str(tmp)
    with app.app_context():
        upgrade()
        accounts.create_user(*STAFF)
    smtp = SmtpServer().start()
    server = make_server("127.0.0.1", free_port(), app, threaded=True, request_handler=QuietHandler)
    serving = threading.Thread(target=server.serve_forever, name="live-server")
    serving.start()
    env = dict(os.environ, OUTBOX_DATABASE_URL=url, OUTBOX_INSTANCE_PATH=str(tmp),
               OUTBOX_MAIL_PORT=str(smtp.port), OUTBOX_MAIL_DEFAULT_SENDER=SENDER,
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


@dataclass
class Console:
    """Every console error and uncaught exception of the pages watched; CSP reports land here."""

    errors: list[str] = field(default_factory=list)
    checked: int = 0  # errors before this index have been reported already
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("console", self._message)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught on {page.url}: {exc}"))

    def _message(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.location.get('url')}: {message.text}")

    def allow_status(self, url: str, status: int) -> None:
        """The current test expects url to answer status: Chromium logs that as an error."""
        logged = f"Failed to load resource: the server responded with a status of {status} "
        self.allowed.append(re.compile(f"^{re.escape(url)}: {re.escape(logged)}"))

    def unreported(self) -> list[str]:
        new, self.checked = self.errors[self.checked :], len(self.errors)
        found = [error for error in new if not any(p.search(error) for p in self.allowed)]
        self.allowed.clear()
        return found


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    watched = Console()
    yield watched
    assert not watched.unreported(), "console errors after the last test"


@pytest.fixture(autouse=True)
def clean_console(console: Console) -> Iterator[None]:
    """Fail the test during (or after the one before) which a page logged an error."""
    yield
    errors = console.unreported()
    assert not errors, "errors in the browser console:\n" + "\n".join(errors)


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextmanager
def new_page(browser: Browser, site: Site, console: Console) -> Iterator[Page]:
    context = browser.new_context(base_url=site.url, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        console.watch(page)
        yield page
    finally:
        context.close()


@pytest.fixture(scope="module")
def staff_page(browser: Browser, site: Site, console: Console) -> Iterator[Page]:
    """One tab, signed in through the form, that the scenario tests walk through in turn."""
    SCREENSHOTS.mkdir(exist_ok=True)
    with new_page(browser, site, console) as page:
        page.goto("/")
        sign_in(page, *STAFF)
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        yield page


@contextmanager
def staff_tab(
    browser: Browser,
    site: Site,
    console: Console,
    width: int,
    zone: str = "UTC",
    javascript: bool = True,
) -> Iterator[Page]:
    """A signed-in tab of that width, in a context of its own whose clock runs in zone."""
    context = browser.new_context(base_url=site.url, viewport={"width": width, "height": 900},
                                  timezone_id=zone, java_script_enabled=javascript)  # fmt: skip
    try:
        page = context.new_page()
        console.watch(page)
        page.goto("/sign-in")
        sign_in(page, *STAFF)
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        yield page
    finally:
        context.close()


def sign_in(page: Page, email: str, password: str) -> None:
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def compose(page: Page, to: str, subject: str, text: str, **more: Any) -> int:
    """Fill the compose form from the nav link, send it, and return the new message's id."""
    page.get_by_role("link", name="Compose", exact=True).click()
    page.get_by_label("To", exact=True).fill(to)
    page.get_by_label("Subject", exact=True).fill(subject)
    page.get_by_label("Text body", exact=True).fill(text)
    if "html" in more:
        page.get_by_label("HTML body", exact=True).fill(more["html"])
    if "send_after" in more:  # in the browser's zone, behind "More options"
        page.locator("details.more > summary").click()
        page.get_by_label("Send after", exact=True).fill(more["send_after"])
    if "files" in more:
        page.get_by_label("Attachments", exact=True).set_input_files(more["files"])
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page).to_have_url(re.compile(r"/messages/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


@contextmanager
def same_document(page: Page) -> Iterator[None]:
    """Prove that what happens inside comes from htmx, not from a reload or navigation."""
    page.evaluate("window.__sameDocument = true")
    yield
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"


def status_of(page: Page) -> Any:
    return page.locator("#state .facts .status")


def attempts_of(page: Page) -> Any:
    return page.locator("#state table.attempts tbody tr")


def received(site: Site, subject: str) -> Any:
    mails = [message_from_bytes(r.content, policy=policy.default) for r in site.smtp.received]
    found = [mail for mail in mails if mail["Subject"] == subject]
    assert len(found) == 1, f"{len(found)} mails with subject {subject!r} received"
    return found[0]


def test_sign_in_form_refuses_a_wrong_password_then_lets_staff_in(browser, site, console):
    with new_page(browser, site, console) as page:
        page.goto("/messages")
        expect(page).to_have_url(f"{site.url}/sign-in?next=/messages")
        console.allow_status(page.url, 401)
        sign_in(page, STAFF[0], "not the password")
        expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        sign_in(page, *STAFF)
        expect(page).to_have_url(f"{site.url}/messages")
        expect(page.get_by_role("heading", name="Outbox")).to_be_visible()
        expect(page.locator(".sign-out")).to_contain_text(STAFF[0])
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_composed_message_with_attachment_goes_from_queued_to_sent_live(staff_page, site, tmp_path):
    page = staff_page
    invoice = tmp_path / "invoice-0042.txt"
    invoice.write_text("Invoice 42: three widgets\n")
    site.smtp.recorder.delay = 1.5  # hold DATA, so the page is surely first seen in flight
    try:
        compose(page, "Ann Example <ann@example.com>", "Invoice 42", "Dear Ann,\n\nYour invoice.",
                html="<p>Dear <b>Ann</b>, your invoice.</p>", files=invoice)  # fmt: skip
        with same_document(page):
            expect(status_of(page)).to_have_text(IN_FLIGHT)
            expect(status_of(page)).to_have_text("sent", timeout=LIVE)
    finally:
        site.smtp.recorder.delay = 0
    expect(attempts_of(page)).to_have_count(1)
    expect(attempts_of(page).locator(".status")).to_have_text("sent")
    expect(page.locator("ul.attachments a")).to_have_text("invoice-0042.txt")
    expect(page.frame_locator("iframe.body").locator("b")).to_have_text("Ann")

    mail = received(site, "Invoice 42")
    assert mail["To"] == "Ann Example <ann@example.com>"
    files = [(part.get_filename(), part.get_content()) for part in mail.iter_attachments()]
    assert files == [("invoice-0042.txt", "Invoice 42: three widgets\n")]
    page.screenshot(path=SCREENSHOTS / "message.png", full_page=True)


def test_550_fails_live_and_the_dashboard_resend_sends_it_live(staff_page, site):
    page, recorder = staff_page, site.smtp.recorder
    recorder.rcpt_replies["bounce@example.com"] = (
        "550 5.7.1 <bounce@example.com>: refused by policy"
    )
    try:
        pk = compose(page, "bounce@example.com", "Bounce me", "Nobody will read this.")
        with same_document(page):
            expect(status_of(page)).to_have_text("failed", timeout=LIVE)
        failed = attempts_of(page)
        expect(failed).to_have_count(1)
        cells = failed.locator("td")
        expect(cells.nth(3)).to_have_text("default")  # route
        expect(cells.nth(4)).to_have_text("failed")  # outcome
        expect(cells.nth(5)).to_have_text("550")  # SMTP code
        expect(cells.nth(6)).to_contain_text("refused by policy")
        recorder.rcpt_replies.clear()

        page.get_by_role("link", name="Dashboard", exact=True).click()
        row = page.locator(f"#failure-{pk}")
        expect(row).to_contain_text("bounce@example.com")
        expect(row).to_contain_text("550 5.7.1 <bounce@example.com>: refused by policy")
        expect(page.locator(".tile-failed .tile-count")).to_have_text("1")
        expect(page.get_by_role("alert")).to_have_count(0)  # no "no worker seen" banner
        page.screenshot(path=SCREENSHOTS / "dashboard.png", full_page=True)

        recorder.delay = 2.0  # the resent message stays in flight long enough to be watched
        with same_document(page):
            row.get_by_role("button", name="Resend").click()
            expect(row.locator(".status")).to_have_text(IN_FLIGHT)
            expect(row.get_by_role("button", name="Resend")).to_have_count(0)

        row.get_by_role("link", name="Bounce me").click()
        expect(page).to_have_url(f"{site.url}/messages/{pk}")
        with same_document(page):
            expect(status_of(page)).to_have_text(IN_FLIGHT)
            expect(attempts_of(page)).to_have_count(1)
            expect(attempts_of(page)).to_have_count(2, timeout=LIVE)
            expect(status_of(page)).to_have_text("sent", timeout=LIVE)
        expect(attempts_of(page).locator(".status")).to_have_text(["failed", "sent"])
    finally:
        recorder.rcpt_replies.clear()
        recorder.delay = 0
    assert received(site, "Bounce me")["To"] == "bounce@example.com"


def is_rows_poll(response: Response) -> bool:
    request = response.request
    return request.headers.get("hx-request") == "true" and urlsplit(request.url).path == "/messages"


def test_outbox_list_shows_counts_and_updates_a_row_live(staff_page, site, console):
    page = staff_page
    later = (datetime.now(UTC) + timedelta(seconds=6)).strftime("%Y-%m-%dT%H:%M:%S")
    compose(page, "carol@example.com", "Due in a moment", "Hi Carol", send_after=later)
    expect(status_of(page)).to_have_text("queued")

    page.get_by_role("link", name="Outbox", exact=True).click()
    row = page.locator("#rows tr", has_text="Due in a moment")
    with same_document(page):
        expect(row.locator(".status")).to_have_text("queued")
        with site.app.app_context():
            counts = reports.counts()
        assert counts["queued"].value >= 1
        tabs = page.locator("nav.tabs a")
        expect(tabs).to_have_text([f"{tab} {count}" for tab, count in counts.items()])
        expect(tabs.and_(page.locator("[aria-current=page]"))).to_have_text(re.compile(r"^\s*all "))
        page.screenshot(path=SCREENSHOTS / "outbox.png", full_page=True)
        with page.expect_response(is_rows_poll, timeout=LIVE) as poll:
            pass  # the listing asks for itself every 2 s while a row is in flight
        # 200 while the row is still in flight; 286 (htmx: swap these rows, stop polling)
        # if the worker sent it before that first poll, as on a slow machine.
        assert poll.value.status in (200, 286)
        expect(row.locator(".status")).to_have_text("sent", timeout=LIVE)
        expect(row.locator("td.num")).to_have_text("1")  # attempts
        # The tabs refresh with the rows: their counts follow the row to "sent".
        with site.app.app_context():
            counts = reports.counts()
        expect(tabs).to_have_text([f"{tab} {count}" for tab, count in counts.items()])
    page.screenshot(path=SCREENSHOTS / "outbox.png", full_page=True)


def test_compose_shows_a_malformed_address_next_to_its_field(staff_page, console):
    page = staff_page
    page.get_by_role("link", name="Compose", exact=True).click()
    page.get_by_label("To", exact=True).fill("ann@@example.com")
    page.get_by_label("Text body", exact=True).fill("This will not be queued.")
    console.allow_status(page.url, 422)
    page.get_by_role("button", name="Send", exact=True).click()

    field = page.locator(".field.has-error")
    expect(field).to_have_count(1)
    to = field.get_by_label("To", exact=True)
    expect(to).to_have_value("ann@@example.com")
    expect(to).to_have_attribute("aria-invalid", "true")
    problem = (
        "'ann@@example.com' is not an email address: The part after the @-sign "
        "contains invalid characters: '@'."
    )
    expect(to).to_have_accessible_description(problem)
    expect(field.locator("p.error")).to_have_text(problem)
    expect(page.get_by_label("Text body", exact=True)).to_have_value("This will not be queued.")
    page.screenshot(path=SCREENSHOTS / "compose-errors.png", full_page=True)


def test_a_partly_delivered_message_shows_each_recipient_at_phone_and_desktop_width(
    staff_page, site
):
    site.smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.7.1 refused by policy"
    try:
        pk = compose(staff_page, "here@example.com, gone@example.com", "Partly", "Hi")
        # Sent to one, refused for the other: read as a partial delivery, not a green "sent".
        expect(status_of(staff_page)).to_have_text("partly delivered", timeout=15_000)
    finally:
        del site.smtp.recorder.rcpt_replies["gone@example.com"]
    try:
        for width in (390, 1280):
            staff_page.set_viewport_size({"width": width, "height": 900})
            staff_page.goto(f"/messages/{pk}")
            expect(staff_page.get_by_text("partly delivered", exact=True)).to_be_visible()
            rows = staff_page.locator("#state table.recipients tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.nth(0)).to_contain_text("sent")
            expect(rows.nth(1)).to_contain_text("failed")
            expect(rows.nth(1)).to_contain_text("550 5.7.1 refused by policy")
            staff_page.screenshot(
                path=SCREENSHOTS / f"partly-delivered-{width}.png", full_page=True
            )
            box = staff_page.locator("#state table.recipients").bounding_box()
            assert box is not None and box["x"] + box["width"] <= width, (box, width)
    finally:
        staff_page.set_viewport_size({"width": 1280, "height": 900})
