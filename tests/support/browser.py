"""The browser tests' world: Chromium through Playwright, a live site with its worker, staff tabs.

The fixtures are module-scoped (one live site, worker and browser per test module); a
browser test module asks for `chromium` (first, so nothing starts for tests that
cannot run) and `clean_console` through its pytestmark.
"""

from __future__ import annotations

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
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any, NoReturn

import pytest
from flask import Flask
from flask_migrate import upgrade
from sqlalchemy import func, select
from werkzeug.serving import WSGIRequestHandler, make_server

from outbox import create_app, queue
from outbox.auth import accounts
from outbox.core.drafts import build_draft
from outbox.models import Message, WorkerBeat
from outbox.models.db import db, dispose_engines

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
        expect,
        sync_playwright,
    )
except ImportError:  # the chromium fixture skips every browser test
    sync_playwright = None


# Debian's Chromium, never a browser Playwright downloads.
CHROMIUM = Path("/usr/bin/chromium")


CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip


SCREENSHOTS = Path(__file__).parents[1] / "screenshots"


STAFF = ("staff@example.com", "correct horse battery")


SENDER = "outbox@example.com"


LIVE = 15_000  # milliseconds to wait for something the worker and htmx polling bring


class QuietHandler(WSGIRequestHandler):
    """Werkzeug's handler without a log line per request (htmx polls every second)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def _read_whole(file: Any, block_size: int = 8192) -> list[bytes]:
    """The WSGI file wrapper of the test server: the file read at once and closed.

    Werkzeug's development server leaves a static file open when its thread is left
    mid-answer at shutdown or the browser goes away; the ResourceWarning then fails
    whichever test runs when it is collected. The files served here are small.
    """
    try:
        return [file.read()]
    finally:
        file.close()


def _closing_files(app: Flask) -> Any:
    """app, with static files read whole (_read_whole) instead of streamed."""

    def serve(environ: dict[str, Any], start_response: Any) -> Any:
        environ["wsgi.file_wrapper"] = _read_whole
        return app(environ, start_response)

    return serve


@dataclass
class Site:
    url: str
    app: Flask
    smtp: SmtpServer
    log: Path | None = None  # the worker's output


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Checked first, so that nothing is started for tests that cannot run."""
    if sync_playwright is None:
        unavailable("the playwright package is not installed (pip install playwright)")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium); no browser is downloaded")
    return CHROMIUM


def _wait_for_heartbeat(app: Flask, worker: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Until the worker's first tick: its stop handlers are in place from then on.

    A module of one quick test would otherwise stop a worker still importing, which
    SIGTERM kills outright (exit -15) instead of stopping it cleanly.
    """
    deadline = time.monotonic() + processes.START_TIMEOUT
    with app.app_context():
        while not db.session.scalar(select(func.count()).select_from(WorkerBeat)):
            db.session.rollback()
            assert worker.poll() is None, "the worker exited before its first tick"
            assert time.monotonic() < deadline, f"no tick within {processes.START_TIMEOUT:g} s"
            time.sleep(0.1)
        db.session.rollback()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Migrated SQLite file, live web server, SMTP server, a worker process, a staff account."""
    with live_site(tmp_path_factory.mktemp("browser")) as found:
        yield found


@pytest.fixture(scope="module")
def capture_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The site with its web app and worker in capture mode (OUTBOX_DELIVERY=capture)."""
    with live_site(tmp_path_factory.mktemp("capture"), DELIVERY="capture") as found:
        yield found


@contextmanager
def live_site(tmp: Path, **settings: str) -> Iterator[Site]:
    """A site in tmp; settings (names without OUTBOX_) go to the web app and the worker alike."""
    url = f"sqlite:///{tmp / 'outbox.sqlite3'}"
    # A thread per request here: the tabs of one module's tests may all hold live events
    # (a closed tab's is given back only at its next push), so no page falls to polling.
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "browser-test", "LIVE_STREAMS": 100,
                      "MAIL_DEFAULT_SENDER": SENDER, "POLL_INTERVAL": 1.0, **settings})  # fmt: skip
    app.instance_path = str(tmp)
    with app.app_context():
        upgrade()
        accounts.create_user(*STAFF)
    smtp = SmtpServer().start()
    server = make_server("127.0.0.1", free_port(), _closing_files(app), threaded=True,
                         request_handler=QuietHandler)  # fmt: skip
    serving = threading.Thread(target=server.serve_forever, name="live-server")
    serving.start()
    env = dict(os.environ, OUTBOX_DATABASE_URL=url, OUTBOX_INSTANCE_PATH=str(tmp),
               OUTBOX_MAIL_PORT=str(smtp.port), OUTBOX_MAIL_DEFAULT_SENDER=SENDER,
               OUTBOX_POLL_INTERVAL="1", OUTBOX_RETRY_DELAY="1")  # fmt: skip
    env.update({f"OUTBOX_{name}": value for name, value in settings.items()})
    log_path = tmp / "worker.log"
    log = log_path.open("w")
    worker = processes.start([sys.executable, "-m", "outbox", "worker"], env=env,
                             stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        _wait_for_heartbeat(app, worker)
        yield Site(f"http://127.0.0.1:{server.port}", app, smtp, log_path)
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


@pytest.fixture
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
        page.wait_for_load_state("load")  # styled before the test reads it (fits says why)
        yield page


@contextmanager
def staff_tab(
    browser: Browser,
    site: Site,
    console: Console,
    width: int,
    zone: str = "UTC",
    javascript: bool = True,
    events: bool = True,
    scheme: str = "light",
) -> Iterator[Page]:
    """A signed-in tab of that width, in a context of its own whose clock runs in zone, in
    the color scheme given; without events, a browser with no EventSource (the dashboard
    polls instead)."""
    context = browser.new_context(base_url=site.url, viewport={"width": width, "height": 900},
                                  timezone_id=zone, java_script_enabled=javascript,
                                  color_scheme=scheme)  # type: ignore[arg-type]  # fmt: skip
    if not events:
        context.add_init_script("delete window.EventSource")
    try:
        page = context.new_page()
        console.watch(page)
        page.goto("/sign-in")
        sign_in(page, *STAFF)
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        page.wait_for_load_state("load")  # styled before the test reads it (fits says why)
        yield page
    finally:
        context.close()


def sign_in(page: Page, email: str, password: str) -> None:
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def go_to(page: Page, name: str) -> None:
    """Follow a link of the navigation, opening the phone's menu first when it is closed.

    The menu's summary shows only on a phone once the stylesheet has come: read before the
    load event (just after a click led here), it is visible at any width and the click then
    waits for it in vain."""
    page.wait_for_load_state("load")
    menu = page.locator("details.menu")
    if menu.locator("summary").is_visible() and not menu.evaluate("menu => menu.open"):
        menu.locator("summary").click()
    page.get_by_role("navigation", name="Pages").get_by_role("link", name=name, exact=True).click()


def compose(page: Page, to: str, subject: str, text: str, **more: Any) -> int:
    """Fill the compose form from the nav link, send it, and return the new message's id."""
    go_to(page, "Compose")
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


def received(site: Site, subject: str) -> Any:
    mails = [message_from_bytes(r.content, policy=policy.default) for r in site.smtp.received]
    found = [mail for mail in mails if mail["Subject"] == subject]
    assert len(found) == 1, f"{len(found)} mails with subject {subject!r} received"
    return found[0]


WIDTHS = (390, 1280)


# The elements of the page's own content that reach past the right edge of the viewport.
PAST_THE_EDGE = """() => {
  const edge = document.documentElement.clientWidth + 0.5;
  return [...document.querySelectorAll("main, main *")]
    .map(e => [e, e.getBoundingClientRect().right])
    .filter(([, right]) => right > edge)
    .map(([e, right]) => `${e.tagName.toLowerCase()}.${e.className} ${right}`);
}"""


def fits(page: Page, width: int) -> None:
    """Nothing in the page's content reaches past the viewport: no sideways scrolling.

    The header is the layout's (its own test holds it at 390 px); this holds what is below.
    A page reached by a click can be read before its stylesheet has come on a busy machine
    (unstyled, the stacked tables are as wide as their columns): the load event waits for it.
    """
    page.wait_for_load_state("load")
    assert page.evaluate("document.documentElement.clientWidth") <= width
    assert page.evaluate(PAST_THE_EDGE) == [], f"wider than {width} px"


def enqueue(site: Site, to: str, subject: str) -> int:
    """A message queued as the API would; the site's worker sends it."""
    with site.app.app_context():
        draft = build_draft({"to": to, "subject": subject, "text": "Hi"}, SENDER)
        message, _ = queue.enqueue(draft, source="test", max_attempts=1)
        db.session.remove()
        return message.id


def stored(site: Site, subject: str) -> Message:
    with site.app.app_context():
        found = db.session.execute(select(Message).where(Message.subject == subject)).scalar_one()
        db.session.expunge(found)
        db.session.remove()
        return found


def store(site: Site, to: str, subject: str, **more: Any) -> int:
    """A message queued as the API would queue it."""
    with site.app.app_context():
        draft = build_draft({"to": to, "subject": subject, "text": "Hello", **more}, SENDER)
        message, _ = queue.enqueue(draft, source="api:shop-backend", max_attempts=2)
        return message.id


def settled(site: Site, *ids: int) -> dict[int, str]:
    """Wait for the worker to finish with the messages; their statuses."""
    deadline = time.monotonic() + LIVE / 1000
    while True:
        with site.app.app_context():
            found = dict(db.session.execute(select(Message.id, Message.status)
                                            .where(Message.id.in_(ids))).all())  # fmt: skip
        if all(s in ("sent", "failed") for s in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def screenshot_fits(page: Page, name: str, width: int) -> None:
    """Nothing scrolls sideways; the user and Sign out are in view; a screenshot kept."""
    page.wait_for_load_state("load")  # the stylesheet has come (fits says why)
    page.screenshot(path=SCREENSHOTS / f"{name}-{width}.png", full_page=True)
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    wide = page.evaluate(
        "Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect()"
        ".right > window.innerWidth + 1).slice(0, 5).map(e => e.tagName + '.' + e.className)"
    )
    assert scroll <= inner, f"{name} at {width} px scrolls sideways: {scroll} > {inner}: {wide}"
    if name != "sign-in":
        user = page.locator(".sign-out .user")
        expect(user).to_have_text(STAFF[0])
        expect(user).to_be_in_viewport()
        expect(page.get_by_role("button", name="Sign out")).to_be_in_viewport()
        box = page.get_by_role("button", name="Sign out").bounding_box()
        assert box is not None and box["x"] + box["width"] <= width
