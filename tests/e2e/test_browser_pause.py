"""Pause and resume in a real browser: the dashboard's button, the banners, the worker waiting."""

import time

import pytest
from playwright.sync_api import expect

from outbox.ops import pause
from tests.support.browser import LIVE, SCREENSHOTS, enqueue, fits, go_to, staff_tab, stored

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


@pytest.mark.parametrize("width", (390, 1280))
def test_pause_from_the_dashboard_holds_the_queue_and_resume_sends_it(
    browser,
    site,
    console,
    width,
):
    SCREENSHOTS.mkdir(exist_ok=True)
    try:
        with staff_tab(browser, site, console, width) as page:
            asked: list[str] = []
            page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
            page.get_by_label("Reason").fill("relay maintenance")
            page.get_by_role("button", name="Pause sending").click()
            banner = page.locator("#paused")
            expect(banner).to_contain_text("Sending is paused by staff@example.com", timeout=LIVE)
            expect(banner).to_contain_text("relay maintenance")
            assert asked and asked[0].startswith("Pause sending?")
            assert banner.locator("time").get_attribute("title").endswith(" UTC")
            subject = f"Held {width}"
            pk = enqueue(site, f"held-{width}@example.com", subject)
            time.sleep(2.5)  # more than two of the site worker's poll intervals (1 s)
            assert stored(site, subject).status == "queued"
            expect(page.get_by_role("button", name="Resume sending")).to_be_visible()
            fits(page, width)
            page.screenshot(path=SCREENSHOTS / f"dashboard-paused-{width}.png", full_page=True)

            go_to(page, "Outbox")
            expect(page.locator("#paused")).to_contain_text("relay maintenance", timeout=LIVE)
            fits(page, width)
            page.screenshot(path=SCREENSHOTS / f"outbox-paused-{width}.png", full_page=True)

            go_to(page, "Dashboard")
            # The live refresh follows a resume and a pause made elsewhere (the shell).
            with site.app.app_context():
                pause.resume()
            expect(page.get_by_role("button", name="Pause sending")).to_be_visible(timeout=LIVE)
            with site.app.app_context():
                pause.pause("cli (ops)", "from the shell")
            expect(banner).to_contain_text("paused by cli (ops)", timeout=LIVE)
            page.get_by_role("button", name="Resume sending").click()
            expect(banner).to_have_count(0, timeout=LIVE)
            expect(page.get_by_role("button", name="Pause sending")).to_be_visible()
            assert asked[-1].startswith("Resume sending?")
        deadline = time.monotonic() + LIVE / 1000
        while stored(site, subject).status != "sent":
            assert time.monotonic() < deadline, "not sent after resume"
            time.sleep(0.1)
        assert pk
    finally:
        with site.app.app_context():
            pause.resume()
