"""The mailing page in a real browser: progress that follows the worker live, and Pause,
Resume and Cancel in place (htmx)."""

import io
import json
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from outbox.capabilities.mailings import intake
from outbox.models import utcnow
from outbox.models.db import db
from tests.support.browser import LIVE, SCREENSHOTS, fits, go_to, staff_tab

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


def mailing(site, count: int, **fields) -> int:  # type: ignore[no-untyped-def]
    """A mailing stored as the API stores one; the site's worker sends it."""
    recipients = [{"email": f"m{n}@example.com", "fields": {"n": n}} for n in range(count)]
    payload = {"from": "news@example.com", "subject": "Issue {{ n }}", "text": "Hi {{ n }}",
               **fields, "recipients": recipients}  # fmt: skip
    with site.app.app_context():
        found, _ = intake.create(io.BytesIO(json.dumps(payload).encode()), source="test",
                                 max_attempts=1, default_sender=None)  # fmt: skip
        db.session.remove()
        return found.id


@pytest.mark.parametrize("width", (390, 1280))
def test_the_mailing_page_follows_sending_live_and_pauses_resumes_and_cancels(
    browser, site, console, width
):
    SCREENSHOTS.mkdir(exist_ok=True)
    later = (utcnow() + timedelta(hours=1)).isoformat()
    held = mailing(site, 12, send_after=later)
    sent = mailing(site, 5)
    with staff_tab(browser, site, console, width) as page:
        page.goto(f"/mailings/{sent}")
        expect(page.locator("#count-sent")).to_have_text("5", timeout=LIVE)
        expect(page.locator("#count-queued")).to_have_text("0")
        assert [m for m in site.smtp.received if b"Subject: Issue 4" in m.content]

        asked: list[str] = []
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        go_to(page, "Mailings")
        page.get_by_role("link", name=f"#{held}", exact=True).click()
        expect(page.locator("#count-queued")).to_have_text("12")
        page.evaluate("window.__sameDocument = true")
        page.get_by_role("button", name="Pause").click()
        expect(page.locator("#mailing-state")).to_have_text("paused", timeout=LIVE)
        page.get_by_role("button", name="Resume").click()
        expect(page.locator("#mailing-state")).to_have_text("open", timeout=LIVE)
        page.get_by_role("button", name="Cancel mailing").click()
        expect(page.locator("#mailing-state")).to_have_text("cancelled", timeout=LIVE)
        expect(page.locator("#count-cancelled")).to_have_text("12")
        assert page.evaluate("window.__sameDocument") is True  # swapped in place by htmx
        assert asked == [f"Cancel mailing #{held}? Its waiting recipients are cancelled."]
        fits(page, width)
        page.screenshot(path=SCREENSHOTS / f"mailing-{width}.png", full_page=True)
