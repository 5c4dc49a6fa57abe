"""The suppression list in a real Chromium, at phone and desktop width, with a live worker."""

import re

import pytest
from playwright.sync_api import Page, expect

from outbox.capabilities import suppression
from outbox.models.db import db
from tests.support.browser import LIVE, SCREENSHOTS, Site, enqueue, fits, go_to, staff_tab

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


def compose_anyway(page: Page, to: str, subject: str, warned: dict[str, str], width: int) -> int:
    """Compose to addresses some of which are suppressed: named as To is left, then the
    first Send brings the form back, as typed, with a warning naming each in warned with
    its words; Send anyway queues it. The new message's id."""
    go_to(page, "Compose")
    page.get_by_label("To", exact=True).fill(to)
    page.get_by_label("Subject", exact=True).fill(subject)  # To left: checked as it is
    for address in warned:
        expect(page.locator("#suppressed-check")).to_contain_text(address)
    page.get_by_label("Text body", exact=True).fill("Hi")
    page.get_by_role("button", name="Send", exact=True).click()
    warning = page.locator("#suppressed-warning")
    expect(warning).to_be_visible()
    expect(warning.get_by_role("listitem")).to_have_count(len(warned))
    for address, words in warned.items():
        expect(warning.get_by_role("listitem").filter(has_text=address)).to_contain_text(words)
    expect(page.get_by_label("To", exact=True)).to_have_value(to)
    expect(page.get_by_label("Subject", exact=True)).to_have_value(subject)
    expect(page.get_by_role("button", name="Send", exact=True)).to_have_count(0)
    fits(page, width)
    page.screenshot(path=SCREENSHOTS / f"compose-suppressed-{width}.png", full_page=True)
    warning.get_by_role("button", name="Send anyway").click()
    expect(page).to_have_url(re.compile(r"/messages/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


@pytest.mark.parametrize("width", (390, 1280))
def test_compose_warns_of_a_bounced_address_and_sends_anyway_to_the_others(
    browser, site: Site, console, width
):
    bounced, fine = f"bounced-{width}-{'x' * 30}@example.com", f"fine-{width}@example.com"
    with site.app.app_context():
        suppression.add(bounced, "550 5.1.1 no such user", "bounce")
        db.session.commit()
        db.session.remove()
    with staff_tab(browser, site, console, width) as page:
        pk = compose_anyway(page, f"{bounced}, {fine}", f"Warned {width}",
                            {bounced: "hard bounce on"}, width)  # fmt: skip
        expect(page.locator("#state .status").first).to_have_text("partly delivered", timeout=LIVE)
        row = page.locator("#state table.recipients tbody tr", has_text=bounced)
        expect(row).to_contain_text("suppressed")
        expect(row).to_contain_text("550 5.1.1 no such user")
    wire = [rcpt for mail in site.smtp.received for rcpt in mail.rcpt_tos]
    assert fine in wire and bounced not in wire and pk


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
        # The compose page warns first, naming it with the list's reason; sent anyway.
        listed_as = asked.upper().replace("@EXAMPLE.COM", "@example.com")
        pk = compose_anyway(page, f"{listed_as}, {other}", f"Suppressed {width}",
                            {listed_as: "added by staff on"}, width)  # fmt: skip
        expect(page.locator("#suppressed-warning")).to_have_count(0)
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
