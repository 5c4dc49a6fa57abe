"""Filtering the outbox list in Chromium, at phone and desktop width: the filter panel, the
chips, and a bulk job over what the filter finds, started and followed to its end."""

from datetime import timedelta

import pytest

from outbox.models import utcnow
from tests.support.browser import LIVE, WIDTHS, Site, fits, go_to, screenshot_fits, staff_tab, store

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium fixture skips the module's tests
    pass

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_filter_its_chips_and_a_job_that_cancels_what_it_found(browser, site: Site, console,
                                                                   width: int):  # fmt: skip
    later = (utcnow() + timedelta(days=1)).isoformat()
    subject = f"Scheduled {width}"
    ids = [store(site, f"m{n}@shop.example", subject, send_after=later) for n in range(3)]
    kept = store(site, "other@example.com", subject, send_after=later)
    with staff_tab(browser, site, console, width) as page:
        go_to(page, "Outbox")
        page.locator("details.filter > summary").click()
        page.get_by_label("To address or @domain").fill("@shop.example")
        page.get_by_label("Subject contains").fill(subject)
        page.get_by_role("button", name="Filter", exact=True).click()
        chips = page.locator("li.chip span")
        expect(chips).to_have_text(["to:@shop.example", f'subject:"{subject}"'])
        expect(page.locator("#rows tr")).to_have_count(3)
        fits(page, width)
        page.get_by_role("link", name=f'Remove subject:"{subject}"').click()
        expect(chips).to_have_text(["to:@shop.example"])
        page.get_by_label("Search or filter").fill(f'to:@shop.example subject:"{subject}"')
        page.get_by_role("button", name="Search", exact=True).click()
        expect(page.locator("#rows tr")).to_have_count(3)
        page.get_by_role("link", name="Cancel all matching").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Cancel all 3 matching?")
        page.get_by_role("button", name="Yes, cancel all 3 matching").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text("Bulk job #")
        expect(page.locator("p.job-outcome")).to_have_text("Done: 3 messages cancelled.",
                                                           timeout=LIVE)  # fmt: skip
        screenshot_fits(page, f"bulk-job-{width}", width)
        page.get_by_role("link", name="← Back to the list").click()
        expect(page.locator("#rows tr")).to_have_count(3)
        expect(page.locator("#rows .status-cancelled")).to_have_count(3)
    assert len(ids) == 3 and kept not in ids
