"""The suppression list in a real Chromium, at phone and desktop width, with a live worker."""

import re

import pytest
from playwright.sync_api import expect

from tests.support.browser import LIVE, SCREENSHOTS, compose, enqueue, fits, go_to, staff_tab

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


@pytest.mark.parametrize("width", (390, 1280))
def test_the_list_fills_from_a_refusal_and_by_hand_and_keeps_mail_off_the_wire(
    browser, site, console, width
):
    unknown, asked, other = (f"{n}-{width}@example.com" for n in ("unknown", "asked", "fine"))
    site.smtp.recorder.rcpt_replies[unknown] = f"550 5.1.1 <{unknown}>: Recipient unknown"
    try:
        refused = enqueue(site, unknown, f"Unknown {width}")
        with staff_tab(browser, site, console, width) as page:
            page.goto(f"/messages/{refused}")
            expect(page.locator("#state .status").first).to_have_text("failed", timeout=LIVE)
    finally:
        site.smtp.recorder.rcpt_replies.pop(unknown, None)
    with staff_tab(browser, site, console, width) as page:
        go_to(page, "Suppressions")
        row = page.locator("table.suppressions tbody tr", has_text=unknown)
        expect(row).to_contain_text("5.1.1")
        expect(row).to_contain_text("smtp")
        expect(row.get_by_role("link", name=f"message #{refused}")).to_be_visible()

        page.get_by_label("Address", exact=True).last.fill(
            asked.upper().replace("@EXAMPLE.COM", "@Example.COM")
        )
        page.get_by_label("Reason", exact=True).fill("asked us by phone")
        page.get_by_label("Expires after (days)").fill("30")
        page.get_by_role("button", name="Suppress", exact=True).click()
        expect(page.get_by_role("status")).to_contain_text("Suppressed")
        expect(page.locator("table.suppressions tbody tr")).to_have_count(1)  # searched for it
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"suppressions-{width}.png", full_page=True)

        # A message to the address as written (another case in the domain) and to another:
        # the one listed reads as suppressed, with the list's reason and a link to it.
        listed_as = asked.upper().replace("@EXAMPLE.COM", "@example.com")
        pk = compose(page, f"{listed_as}, {other}", f"Suppressed {width}", "Hi")
        expect(page.locator("#state .status").first).to_have_text("partly delivered", timeout=LIVE)
        row = page.locator("#state table.recipients tbody tr", has_text=listed_as)
        expect(row).to_contain_text("suppressed")
        expect(row).to_contain_text("asked us by phone")
        box = page.locator("#state table.recipients").bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, (box, width)
        row.get_by_role("link", name="see the list").click()
        expect(page).to_have_url(re.compile(r"/suppressions\?q="))

        row = page.locator("table.suppressions tbody tr", has_text=listed_as)
        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name="Remove").click()
        expect(page.get_by_role("status")).to_contain_text(f"Removed {listed_as}")
        with page.expect_download() as download:
            page.get_by_role("link", name="Export CSV").click()
        exported = download.value.path().read_text(encoding="utf-8")
        assert unknown in exported and listed_as not in exported
    wire = [rcpt for mail in site.smtp.received for rcpt in mail.rcpt_tos]
    assert other in wire and listed_as not in wire and unknown not in wire
    assert pk
