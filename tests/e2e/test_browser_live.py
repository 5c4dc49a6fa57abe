"""Compose and the live dashboard in a real Chromium, at phone and desktop width."""

import re
import time
from datetime import datetime

import pytest
from flask import request
from playwright.sync_api import Page, expect

from outbox.web import dashboard
from tests.support.browser import (
    LIVE,
    SCREENSHOTS,
    STAFF,
    WIDTHS,
    enqueue,
    fits,
    go_to,
    same_document,
    sign_in,
    staff_tab,
    stored,
)

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


def tile(page: Page, name: str):  # type: ignore[no-untyped-def]
    return page.locator(f".tile-{name} .tile-count")


def count(page: Page, name: str) -> int:
    return int(tile(page, name).inner_text().replace(",", ""))


TYPED = {"To": "Ann <ann@example.com>", "Subject": "Zürich at 09:30", "Text body": "See you.",
         "HTML body": "<p>See you.</p>", "Bcc": "boss@example.com",
         "Reply-To": "desk@example.com", "Priority": "3"}  # fmt: skip
FOLDED = ("Cc", "Bcc", "Reply-To", "Priority", "Send after")


@pytest.mark.parametrize("width", WIDTHS)
def test_compose_error_keeps_every_field_then_sends_at_the_berlin_time_in_utc(
    browser, site, console, tmp_path, width
):
    subject = f"{TYPED['Subject']} ({width})"
    brochure = tmp_path / "brochure.txt"
    brochure.write_text("Our brochure\n")
    with staff_tab(browser, site, console, width, zone="Europe/Berlin") as page:
        go_to(page, "Compose")
        more = page.locator("details.more")
        expect(more).not_to_have_attribute("open", "")
        for label in FOLDED:
            expect(page.get_by_label(label, exact=True)).to_be_hidden()
        expect(page.get_by_label("To", exact=True)).to_have_attribute("required", "")
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"compose-{width}.png", full_page=True)

        page.get_by_text("More options").click()
        expect(page.locator("#send-after-zone")).to_have_text(
            "Times in Europe/Berlin. Leave empty to send at once."
        )
        for label, value in {**TYPED, "Subject": subject}.items():
            page.get_by_label(label, exact=True).fill(value)
        page.get_by_label("Cc", exact=True).fill("carl@")  # the one mistake
        page.get_by_label("Send after", exact=True).fill("2030-07-01T09:30:05")
        page.get_by_label("Attachments", exact=True).set_input_files(brochure)
        console.allow_status(page.url, 422)
        page.get_by_role("button", name="Send", exact=True).click()

        expect(page.locator("#cc-error")).to_contain_text("carl@")
        expect(more).to_have_attribute("open", "")  # opened by the server for the error
        for label, value in {**TYPED, "Subject": subject}.items():
            expect(page.get_by_label(label, exact=True)).to_have_value(value)
        expect(page.get_by_label("Send after", exact=True)).to_have_value("2030-07-01T09:30:05")
        expect(page.get_by_label("Cc", exact=True)).to_have_value("carl@")
        expect(page.locator(".files-again")).to_have_text(
            "Files are not kept after an error: choose brochure.txt again."
        )
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"compose-error-{width}.png", full_page=True)

        page.get_by_label("Cc", exact=True).fill("carl@example.com")
        page.get_by_label("Attachments", exact=True).set_input_files(brochure)
        page.get_by_role("button", name="Send", exact=True).click()
        expect(page).to_have_url(re.compile(r"/messages/\d+$"))
    message = stored(site, subject)
    # 09:30:05 in Berlin in July (CEST, UTC+2) is 07:30:05 UTC.
    assert message.send_after == message.next_attempt_at == datetime(2030, 7, 1, 7, 30, 5)
    assert (message.listed("cc"), message.priority, message.attachment_count) == (
        "carl@example.com", 3, 1
    )  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
def test_the_dashboard_shows_what_the_worker_does_while_it_is_open(
    browser, site, console, monkeypatch, width
):
    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1)
    bounce = f"gone-{width}@example.com"
    site.smtp.recorder.rcpt_replies[bounce] = "550 5.7.1 refused by policy"
    try:
        with staff_tab(browser, site, console, width) as page, same_document(page):
            sent, failed = count(page, "sent"), count(page, "failed")
            enqueue(site, f"fine-{width}@example.com", f"Live {width}")
            pk = enqueue(site, bounce, f"Bounce {width}")
            expect(tile(page, "sent")).to_have_text(str(sent + 1), timeout=LIVE)
            expect(tile(page, "failed")).to_have_text(str(failed + 1), timeout=LIVE)
            row = page.locator(f"#failure-{pk}")
            expect(row).to_contain_text("550 5.7.1 refused by policy", timeout=LIVE)
            when = row.locator("time")
            expect(when).to_have_text(re.compile(r"^(just now|\d+ s ago)$"))
            expect(when).to_have_attribute(
                "title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
            )
            expect(page.locator("#live .chart g")).to_have_count(24)
            fits(page, width)
            page.screenshot(path=SCREENSHOTS / f"dashboard-live-{width}.png", full_page=True)
    finally:
        site.smtp.recorder.rcpt_replies.pop(bounce, None)


HIDE = """hidden => {
  Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
  Object.defineProperty(document, "visibilityState", {configurable: true,
                        get: () => (hidden ? "hidden" : "visible")});
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_polling_stops_while_the_tab_is_hidden_and_catches_up_when_shown(
    browser, site, console, monkeypatch
):
    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1)
    # The polls of a browser without server-sent events (test_browser_dashboard_live.py
    # holds the events to the same while hidden).
    with staff_tab(browser, site, console, 1280, events=False) as page, same_document(page):
        polls: list[str] = []
        page.on("request", lambda r: polls.append(r.url) if r.headers.get("hx-request") else None)
        page.wait_for_timeout(2500)
        assert len(polls) >= 1, "the dashboard did not poll while shown"
        page.evaluate(HIDE, True)
        page.wait_for_timeout(300)  # a poll already on its way may land
        polls.clear()
        sent = count(page, "sent")
        enqueue(site, "while-hidden@example.com", "While hidden")
        page.wait_for_timeout(3500)  # three and a half intervals, the mail long sent
        assert polls == [], "the dashboard polled while hidden"
        expect(tile(page, "sent")).to_have_text(str(sent))
        with page.expect_request(lambda r: bool(r.headers.get("hx-request")), timeout=500):
            page.evaluate(HIDE, False)  # asks at once, before the next interval is up
        expect(tile(page, "sent")).to_have_text(str(sent + 1))


@pytest.mark.parametrize("width", WIDTHS)
def test_a_resend_updates_the_tiles_at_once(browser, site, console, monkeypatch, width):
    bounce = f"resend-{width}@example.com"
    site.smtp.recorder.rcpt_replies[bounce] = "550 5.7.1 refused by policy"
    try:
        pk = enqueue(site, bounce, f"Resend me {width}")
        with staff_tab(browser, site, console, width) as page:
            expect(page.locator(f"#failure-{pk}")).to_be_attached(timeout=LIVE)
    finally:
        site.smtp.recorder.rcpt_replies.pop(bounce, None)
    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 3600)  # no poll can be what updates it
    # Nor a pushed event: this browser has no EventSource.
    with staff_tab(browser, site, console, width, events=False) as page, same_document(page):
        row = page.locator(f"#failure-{pk}")
        failed = count(page, "failed")
        assert failed >= 1
        site.smtp.recorder.delay = 2.0  # the resent mail stays in flight while we look
        try:
            row.get_by_role("button", name="Resend").click()
            # The answer shows the row queued; a refresh the tab asked for as it showed
            # (outbox:visible) may land after it and rightly take the row away.
            expect(row.get_by_role("button", name="Resend")).to_have_count(0)
            shown = row.locator(".status").all_inner_texts()
            assert shown in ([], ["queued"], ["sending"]), shown
            expect(tile(page, "failed")).to_have_text(str(failed - 1), timeout=2000)
            in_flight = count(page, "queued") + count(page, "sending")
            assert in_flight >= 1
            fits(page, width)
            page.screenshot(path=SCREENSHOTS / f"dashboard-resent-{width}.png", full_page=True)
        finally:
            site.smtp.recorder.delay = 0


def test_a_refresh_that_read_before_a_resend_cannot_undo_its_tiles(
    browser, site, console, monkeypatch
):
    bounce = "race@example.com"
    site.smtp.recorder.rcpt_replies[bounce] = "550 5.7.1 refused by policy"
    try:
        pk = enqueue(site, bounce, "Race me")
        with staff_tab(browser, site, console, 1280) as page:
            expect(page.locator(f"#failure-{pk}")).to_be_attached(timeout=LIVE)
    finally:
        site.smtp.recorder.rcpt_replies.pop(bounce, None)
    read_now = dashboard._live

    def slow_live(now):  # type: ignore[no-untyped-def]
        """A refresh that reads the state, then takes its time to answer."""
        context = read_now(now)
        if request.headers.get("HX-Request"):
            time.sleep(2.5)
        return context

    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1)
    # The polls' race (test_browser_dashboard_live.py has the events').
    with staff_tab(browser, site, console, 1280, events=False) as page, same_document(page):
        monkeypatch.setattr(dashboard, "_live", slow_live)
        failed = count(page, "failed")
        with page.expect_request(lambda r: r.method == "GET" and bool(r.headers.get("hx-request"))):
            pass  # a refresh is on its way with the old counts
        page.locator(f"#failure-{pk}").get_by_role("button", name="Resend").click()
        expect(tile(page, "failed")).to_have_text(str(failed - 1), timeout=2000)
        for _ in range(30):  # past the moment the stale refresh would have landed
            assert count(page, "failed") == failed - 1
            page.wait_for_timeout(100)
        expect(page.locator(f"#failure-{pk} .status")).to_have_text(
            re.compile(r"^(queued|sending|sent)$")
        )


def test_without_javascript_compose_says_and_uses_utc(browser, site, console):
    context = browser.new_context(base_url=site.url, viewport={"width": 390, "height": 900},
                                  timezone_id="Asia/Tokyo", java_script_enabled=False)  # fmt: skip
    try:
        page = context.new_page()
        console.watch(page)
        page.goto("/messages/new")
        sign_in(page, *STAFF)
        expect(page).to_have_url(f"{site.url}/messages/new")
        page.get_by_label("To", exact=True).fill("ann@example.com")
        page.get_by_label("Text body", exact=True).fill("Hi")
        page.get_by_text("More options").click()  # a <details> opens without JavaScript
        expect(page.locator("#send-after-zone")).to_contain_text("Times in UTC.")
        page.get_by_label("Subject", exact=True).fill("No script")
        page.get_by_label("Send after", exact=True).fill("2030-01-15T09:30")
        page.get_by_role("button", name="Send", exact=True).click()
        expect(page).to_have_url(re.compile(r"/messages/\d+$"))
    finally:
        context.close()
    assert stored(site, "No script").send_after == datetime(2030, 1, 15, 9, 30)
