"""Capture mode end to end: a real worker keeps the mail; Chromium shows it, no script run."""

import re

import pytest
from playwright.sync_api import expect

from outbox import queue
from outbox.core.drafts import build_draft
from outbox.models.db import db
from tests.support.browser import SENDER, WIDTHS, fits, go_to, settled, staff_tab

pytestmark = [pytest.mark.usefixtures("chromium", "clean_console"), pytest.mark.browser]

# A script that would mark the frame's body, and the page's, if it ever ran.
HTML = ("<h1 id='greeting'>Hello from staging</h1><p style='color: #a00'>Styled.</p>"
        "<script>document.body.dataset.ran = 'yes'; parent.document.body.dataset.ran = 'yes';"
        "document.title = 'ran'</script>")  # fmt: skip


def test_a_real_worker_captures_the_mail_and_the_page_shows_it_with_no_script_run(
    browser, capture_site, console
):
    with capture_site.app.app_context():
        draft = build_draft({"to": "ann@example.com", "cc": "bob@example.org",
                             "subject": "Captured hello", "text": "Plain hello",
                             "html": HTML}, SENDER)  # fmt: skip
        message, _ = queue.enqueue(draft, source="test", max_attempts=1)
        db.session.remove()
    assert settled(capture_site, message.id) == {message.id: "sent"}
    assert capture_site.smtp.received == []  # nothing left for the network
    assert capture_site.log is not None
    assert "OUTBOX_DELIVERY=capture: no mail leaves" in capture_site.log.read_text()
    for width in WIDTHS:
        with staff_tab(browser, capture_site, console, width) as page:
            expect(page.locator(".banner.delivery")).to_contain_text("Capture mode")
            go_to(page, "Captured")
            expect(page.get_by_role("heading", name="Captured")).to_be_visible()
            fits(page, width)
            page.get_by_role("link", name="Captured hello").click()
            expect(page).to_have_url(re.compile(r"/captured/\d+$"))
            expect(page.locator("pre.body").first).to_have_text("Plain hello\n")
            # Chromium says so in the console when the sandbox stops a frame's script (here,
            # and in the message page's frame of the HTML body).
            console.allowed.append(re.compile(r"Blocked script execution in '[^']*' because the "
                                              r"document's frame is sandboxed"))  # fmt: skip
            frame = page.frame_locator("iframe.body")
            expect(frame.locator("#greeting")).to_have_text("Hello from staging")
            expect(frame.locator("body")).not_to_have_attribute("data-ran", "yes")
            assert page.evaluate("document.body.dataset.ran") is None
            assert "ran" not in page.title()
            expect(page.get_by_role("heading", name="Raw source")).to_be_visible()
            expect(page.locator("pre.raw")).to_contain_text("Subject: Captured hello")
            fits(page, width)
            page.get_by_role("link", name=f"#{message.id}").click()
            expect(page.locator(".captured-copy")).to_be_visible()
