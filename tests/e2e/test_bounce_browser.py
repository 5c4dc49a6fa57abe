"""The bounce inbox and a bounced message's page in a real browser, at 390 and 1280 px."""

import time

import pytest
from playwright.sync_api import expect

from outbox.capabilities.bounces import store
from outbox.models.db import db
from tests.support import bouncemail, processes
from tests.support.browser import LIVE, SCREENSHOTS, enqueue, fits, go_to, staff_tab, stored

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]
LONG = "a-very-long-local-part-that-does-not-break-anywhere." * 2 + "x@example.org"


def bounced(site, width: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """A message the site's worker sent, and the Gmail bounce of its recipient; their ids."""
    subject = f"Bounced {width}"
    pk = enqueue(site, f"gone-{width}@example.org", subject)
    with site.app.app_context():
        # The site's worker polls every second; the deadline only guards against a hang.
        deadline = time.monotonic() + processes.START_TIMEOUT
        while stored(site, subject).status != "sent":
            assert time.monotonic() < deadline, "the site's worker did not send the message"
            time.sleep(0.1)
        message_id = stored(site, subject).message_id
        mail = bouncemail.gmail("bounces@example.com", f"gone-{width}@example.org", message_id)
        bounce = store.take_in(mail, "smtp")  # matched by the Message-ID
        lost = f"<lost-{width}@example.com>"  # a mail of its own per run: not deduplicated
        store.take_in(bouncemail.exim("bounces@example.com", LONG, lost), "imap")
        db.session.remove()
    return pk, bounce


@pytest.mark.parametrize("width", (390, 1280))
def test_the_inbox_a_bounce_and_the_bounced_message_fit_the_screen(browser, site, console, width):
    SCREENSHOTS.mkdir(exist_ok=True)
    pk, bounce = bounced(site, width)
    with staff_tab(browser, site, console, width) as page:
        go_to(page, "Bounces")
        expect(page.get_by_role("heading", name="Bounce inbox")).to_be_visible()
        expect(page.locator("table.bounces tbody tr").first).to_contain_text(LONG)  # newest first
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"bounces-{width}.png", full_page=True)
        page.get_by_role("link", name="unmatched", exact=True).click()
        expect(page.locator("table.bounces tbody")).to_contain_text(LONG)
        expect(page.locator("table.bounces tbody")).not_to_contain_text(f"gone-{width}")
        page.goto(f"/bounces/{bounce}")
        expect(page.get_by_text("by its Message-ID")).to_be_visible()
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"bounce-mail-{width}.png", full_page=True)
        page.get_by_role("link", name=f"#{pk}", exact=True).click()
        rows = page.locator("#state table.recipients tbody tr")
        expect(rows.first).to_contain_text("bounced", timeout=LIVE)
        expect(rows.first).to_contain_text("The email account that you tried to reach")
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"bounced-message-{width}.png", full_page=True)
