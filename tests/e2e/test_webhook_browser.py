"""The webhook pages in Chromium, at phone and desktop width: add with the secret shown once,
the deliveries of an endpoint, and the banner of a disabled one."""

import pytest

from outbox.capabilities.webhooks import endpoints, events, store
from outbox.models.db import db
from tests.support.browser import WIDTHS, go_to, screenshot_fits, staff_tab

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium fixture skips the module's tests
    pass

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]
LONG_URL = "http://127.0.0.1:9/a-long-path/of-the-receiving-app/outbox/events?key=" + "k" * 60


@pytest.fixture(scope="module")
def hooked(site) -> int:  # type: ignore[no-untyped-def]
    """An endpoint with a delivery to show, and a disabled one for the banner."""
    with site.app.app_context():
        site.app.config["WEBHOOK_ALLOW_PRIVATE"] = True  # the endpoints' hosts are made up
        try:
            shown, _ = endpoints.add("http://127.0.0.1:9/hooks")
            off, _ = endpoints.add("http://127.0.0.1:9/" + "x" * 80)
        finally:
            site.app.config["WEBHOOK_ALLOW_PRIVATE"] = False
        events.emit(events.FAILED, message_pk=1, message_id="<" + "m" * 60 + "@example.com>",
                    code="550", text="550 5.1.1 <gone@example.com>: no such user " * 3)  # fmt: skip
        store.disable(off.id, "delivery 3 failed 9 times, lastly: connection refused by "
                      "127.0.0.1:9")  # fmt: skip
        db.session.commit()
        return shown.id


@pytest.mark.parametrize("width", WIDTHS)
def test_the_webhook_pages_fit_and_the_banner_names_the_disabled_endpoint(
    browser, site, console, hooked, width
):
    with staff_tab(browser, site, console, width) as page:
        page.goto("/")
        expect(page.locator("p.webhooks-off")).to_contain_text("failed 9 times")
        go_to(page, "Webhooks")
        expect(page.get_by_role("heading", name="Webhooks")).to_be_visible()
        screenshot_fits(page, "webhooks", width)
        page.goto(f"/admin/webhooks/{hooked}")
        # The worker tries it and finds the address private (the site has no opt-out).
        expect(page.locator("table.deliveries")).to_contain_text("message.failed")
        page.get_by_text("Request").first.click()
        screenshot_fits(page, "webhook-endpoint", width)


def test_an_admin_adds_an_endpoint_and_sees_its_secret_once_on_a_phone(browser, site, console):
    with staff_tab(browser, site, console, 390) as page:
        page.goto("/admin/webhooks")
        console.allow_status(f"{site.url}/admin/webhooks", 422)
        page.get_by_label("URL (http or https)").fill("http://10.0.0.7/hooks")
        page.get_by_role("button", name="Add").click()
        expect(page.get_by_role("alert").filter(has_text="10.0.0.7")).to_contain_text(
            "private, loopback")  # fmt: skip
        site.app.config["WEBHOOK_ALLOW_PRIVATE"] = True
        try:
            page.get_by_label("URL (http or https)").fill(LONG_URL)
            page.get_by_label("message.sent").check()
            page.get_by_role("button", name="Add").click()
        finally:
            site.app.config["WEBHOOK_ALLOW_PRIVATE"] = False
        secret = page.locator("#new-secret")
        expect(secret).to_contain_text("whsec_")
        screenshot_fits(page, "webhook-added", 390)
        expect(page.get_by_text(LONG_URL)).to_be_visible()
        page.goto("/admin/webhooks")
        expect(page.locator("#new-secret")).to_have_count(0)
