"""In Chromium: a viewer sees no changing button, and sign-out kills a copied cookie."""

from typing import Any

import pytest

from outbox import queue
from outbox.auth import accounts
from outbox.core.drafts import build_draft
from tests.support.browser import SENDER, Site, sign_in

try:
    from playwright.sync_api import Browser, expect
except ImportError:  # the chromium fixture skips the module's tests
    pass

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]
VIEWER = ("viewer@example.com", "viewer password")


def store(site: Site, subject: str) -> int:
    with site.app.app_context():
        draft = build_draft({"to": "a@example.com", "subject": subject, "text": "Hi",
                             "send_after": "2099-01-01T00:00:00Z"}, SENDER)  # fmt: skip
        message, _ = queue.enqueue(draft, source="api:shop", max_attempts=2)
        return message.id


def test_a_viewer_sees_no_buttons_and_a_copied_cookie_dies_at_sign_out(
    browser: "Browser", site: Site, console: Any
) -> None:
    with site.app.app_context():
        accounts.create_user(*VIEWER, role="viewer")
    waiting = store(site, "waits till 2099")
    mine = browser.new_context(base_url=site.url)
    copy = browser.new_context(base_url=site.url)
    try:
        page = mine.new_page()
        console.watch(page)
        page.goto("/sign-in")
        sign_in(page, *VIEWER)
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        nav = page.get_by_role("navigation", name="Pages")
        expect(nav.get_by_role("link", name="Outbox")).to_be_visible()
        for hidden in ("Compose", "Accounts", "Tokens", "Audit"):
            expect(nav.get_by_role("link", name=hidden)).to_have_count(0)
        page.goto(f"/messages/{waiting}")
        expect(page.get_by_role("heading", name="waits till 2099")).to_be_visible()
        expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
        page.goto("/messages")
        expect(page.get_by_role("button", name="Cancel chosen")).to_have_count(0)
        copy.add_cookies(mine.cookies())
        stolen = copy.new_page()
        stolen.goto("/")
        expect(stolen.get_by_role("heading", name="Dashboard")).to_be_visible()
        # The list refreshes itself; on a busy machine a refresh can set off just as the
        # sign-out lands and be answered 401, which Chromium logs as an error.
        console.allow_status(f"{site.url}/messages?status=all", 401)
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        stolen.goto("/")
        expect(stolen.get_by_role("button", name="Sign in")).to_be_visible()
    finally:
        mine.close()
        copy.close()
