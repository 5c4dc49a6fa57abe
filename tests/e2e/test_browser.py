"""The staff pages in a real Chromium against a live server, a real worker and SMTP server."""

import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest

from outbox.ops import reports
from tests.support.browser import (
    LIVE,
    SCREENSHOTS,
    STAFF,
    compose,
    go_to,
    new_page,
    received,
    same_document,
    sign_in,
    unavailable,
)

try:
    from playwright.sync_api import Page, Response, expect
except ImportError:
    unavailable("the playwright package is not installed (pip install playwright)")

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]

IN_FLIGHT = re.compile(r"^(queued|sending)$")


def status_of(page: Page) -> Any:
    return page.locator("#state .facts .status")


def attempts_of(page: Page) -> Any:
    return page.locator("#state table.attempts tbody tr")


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
    held = threading.Event()
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
        expect(cells.nth(3)).to_have_text("default")
        expect(cells.nth(4)).to_have_text("failed")  # outcome
        expect(cells.nth(5)).to_have_text("550")  # SMTP code
        expect(cells.nth(6)).to_contain_text("refused by policy")
        recorder.rcpt_replies.clear()

        go_to(page, "Dashboard")
        row = page.locator(f"#failure-{pk}")
        expect(row).to_contain_text("bounce@example.com")
        expect(row).to_contain_text("550 5.7.1 <bounce@example.com>: refused by policy")
        expect(page.locator(".tile-failed .tile-count")).to_have_text("1")
        expect(page.get_by_role("alert")).to_have_count(0)  # no "no worker seen" banner
        page.screenshot(path=SCREENSHOTS / "dashboard.png", full_page=True)

        # The link leads to the message (followed by its address below: once resent, the
        # message is no longer a failure and the next push takes its row away).
        expect(row.get_by_role("link", name="Bounce me")).to_have_attribute(
            "href", f"/messages/{pk}"
        )
        # The resent message waits at DATA until the test has seen it in flight.
        recorder.on_data = lambda: held.wait(LIVE / 1000)
        with same_document(page):
            row.get_by_role("button", name="Resend").click()
            expect(page.get_by_role("status")).to_contain_text(f"Message #{pk} is queued again.")
            expect(row.get_by_role("button", name="Resend")).to_have_count(0)
            expect(page.locator(".tile-failed .tile-count")).to_have_text("0")

        page.goto(f"/messages/{pk}")
        with same_document(page):
            expect(status_of(page)).to_have_text(IN_FLIGHT)
            expect(attempts_of(page)).to_have_count(1)
            held.set()
            expect(attempts_of(page)).to_have_count(2, timeout=LIVE)
            expect(status_of(page)).to_have_text("sent", timeout=LIVE)
        expect(attempts_of(page).locator(".status")).to_have_text(["failed", "sent"])
    finally:
        recorder.rcpt_replies.clear()
        recorder.on_data = None
        held.set()
    assert received(site, "Bounce me")["To"] == "bounce@example.com"


def is_rows_poll(response: Response) -> bool:
    request = response.request
    return request.headers.get("hx-request") == "true" and urlsplit(request.url).path == "/messages"


def test_outbox_list_shows_counts_and_updates_a_row_live(staff_page, site, console):
    page = staff_page
    later = (datetime.now(UTC) + timedelta(seconds=6)).strftime("%Y-%m-%dT%H:%M:%S")
    compose(page, "carol@example.com", "Due in a moment", "Hi Carol", send_after=later)
    expect(status_of(page)).to_have_text("queued")

    go_to(page, "Outbox")
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
    go_to(page, "Compose")
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
