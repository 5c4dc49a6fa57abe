"""The complaint tab and a complained-of message in a real browser, at 390 and 1280 px."""

import time

import pytest
from playwright.sync_api import expect

from outbox.capabilities.bounces import store
from outbox.models.db import db
from tests.support import complaintmail, processes
from tests.support.browser import LIVE, SCREENSHOTS, enqueue, fits, go_to, staff_tab, stored

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]
FBL = "fbl@example.com"


def complained(site, width: int) -> tuple[int, int, str]:  # type: ignore[no-untyped-def]
    """A message the site's worker sent, and Yahoo's complaint of its recipient: their ids
    and the recipient."""
    subject, address = f"Complained of {width}", f"annoyed-{width}@example.org"
    pk = enqueue(site, address, subject)
    with site.app.app_context():
        # The site's worker polls every second; the deadline only guards against a hang.
        deadline = time.monotonic() + processes.START_TIMEOUT
        while stored(site, subject).status != "sent":
            assert time.monotonic() < deadline, "the site's worker did not send the message"
            time.sleep(0.1)
        message = stored(site, subject)
        raw = complaintmail.yahoo(FBL, message.from_addr, address, message.message_id)
        report = store.take_in(raw, "imap")  # VERP is off: matched by the Message-ID
        db.session.remove()
    return pk, report, address


@pytest.mark.parametrize("width", (390, 1280))
def test_the_complaint_tab_a_complaint_and_its_message_fit_the_screen(
    browser, site, console, width
):
    SCREENSHOTS.mkdir(exist_ok=True)
    pk, report, address = complained(site, width)
    with staff_tab(browser, site, console, width) as page:
        go_to(page, "Bounces")
        page.get_by_role("link", name="complaint", exact=True).click()
        rows = page.locator("table.bounces tbody tr")
        expect(rows.first).to_contain_text(address)
        expect(rows.first).to_contain_text("abuse")
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"complaints-{width}.png", full_page=True)
        rows.first.get_by_role("link", name="FW: Our January news").click()
        expect(page).to_have_url(f"{site.url}/bounces/{report}")
        expect(page.get_by_text("by its Message-ID")).to_be_visible()
        expect(page.locator("table.bounces")).to_contain_text("Yahoo!-Mail-Feedback/2.0")
        fits(page, width)
        page.locator(f'a[href$="/messages/{pk}"]').click()
        recipients = page.locator("#state table.recipients tbody tr")
        expect(recipients.first).to_contain_text("complained", timeout=LIVE)
        expect(page.get_by_role("heading", name="Bounces and complaints")).to_be_visible()
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"complained-message-{width}.png", full_page=True)
