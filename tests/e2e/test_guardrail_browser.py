"""The guardrails in a real browser: a domain paused shows up on the dashboard with its
rates, and an admin's resume answers in place."""

import pytest
from playwright.sync_api import expect

from outbox.capabilities.guardrails import hours, pauses
from outbox.capabilities.guardrails.rates import Counts, hour_of
from outbox.models import utcnow
from outbox.models.db import db
from tests.support.browser import LIVE, SCREENSHOTS, fits, staff_tab

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


@pytest.mark.parametrize("width", (390, 1280))
def test_a_paused_domain_is_shown_with_its_rates_and_resumed_in_place(
    browser, site, console, width
):
    SCREENSHOTS.mkdir(exist_ok=True)
    domain = f"news{width}.example"
    with staff_tab(browser, site, console, width) as page:
        with site.app.app_context():
            now = utcnow()
            hours.add({(hour_of(now), domain, "broadcast"): Counts(sent=200, bounced=20)})
            db.session.commit()
            assert [rate.domain for rate in pauses.check(now)] == [domain]
        banner = page.locator("#guardrails .domain-paused")
        expect(banner).to_contain_text(f"Broadcast mail from {domain} is paused", timeout=LIVE)
        expect(banner).to_contain_text("bounces 10.00% of 200 recipients")
        row = page.locator("table.guardrails tr", has_text=domain).first
        expect(row).to_contain_text("10.00% of 200")
        expect(row).to_contain_text("over")
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"dashboard-guardrails-{width}.png", full_page=True)
        page.get_by_role("button", name=f"Resume {domain}").click()
        # In the page's notice, which the live part's pushes of the state after leave alone.
        expect(page.locator("#notice")).to_contain_text(f"Resumed broadcast mail from {domain}.")
        expect(banner).to_have_count(0)
        with site.app.app_context():
            assert domain not in pauses.held()
