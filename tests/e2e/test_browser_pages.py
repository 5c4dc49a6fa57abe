"""The outbox list, the message page and the error pages in Chromium, at phone and desktop width."""

import base64
import re
import struct
import zlib

import pytest
from sqlalchemy import select

from outbox.capabilities.submission import queue_raw
from outbox.models import Message
from outbox.models.db import db
from tests.support.browser import (
    SCREENSHOTS,
    WIDTHS,
    Site,
    screenshot_fits,
    settled,
    staff_tab,
    store,
)

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium fixture skips the module's tests
    pass

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]


LONG = "a.very.long.mailbox.name.that.goes.on@subdomain.of.an.example-company.example"
REMOTE_HTML = '<p>Hi <img src="https://tracker.example/pixel.gif" alt=""> there</p>'


@pytest.fixture(scope="module")
def shown(site: Site) -> dict[str, int]:
    """Messages of every kind the pages must fit: sent, partly sent, failed, with HTML."""
    site.smtp.recorder.rcpt_replies["gone@example.com"] = (
        "550 5.7.1 <gone@example.com>: refused by policy"
    )
    try:
        ids = {
            "sent": store(
                site, f"Someone With A Long Name <{LONG}>", "Your order has shipped " * 4
            ),
            "partly": store(site, f"here@example.com, gone@example.com, {LONG}", "Partly"),
            "failed": store(site, "gone@example.com", "Bounced"),
            "html": store(site, "ann@example.com", "Newsletter", html=REMOTE_HTML),
        }
        statuses = settled(site, *ids.values())
    finally:
        site.smtp.recorder.rcpt_replies.clear()
    assert statuses == {ids["sent"]: "sent", ids["partly"]: "sent", ids["failed"]: "failed",
                        ids["html"]: "sent"}  # fmt: skip
    return ids


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_the_width_with_the_user_and_sign_out_in_view(
    browser, site, console, shown, width
):
    SCREENSHOTS.mkdir(exist_ok=True)
    context = browser.new_context(base_url=site.url, viewport={"width": width, "height": 860})
    try:
        page = context.new_page()
        console.watch(page)
        page.goto("/sign-in")
        screenshot_fits(page, "sign-in", width)
    finally:
        context.close()
    with staff_tab(browser, site, console, width) as page:
        pages = {
            "dashboard": "/", "outbox": "/messages", "outbox-failed": "/messages?status=failed",
            "search": "/messages?q=example", "message": f"/messages/{shown['sent']}",
            "message-partly": f"/messages/{shown['partly']}",
            "message-html": f"/messages/{shown['html']}", "compose": "/messages/new",
        }  # fmt: skip
        for name, path in pages.items():
            page.goto(path)
            screenshot_fits(page, name, width)
        for path, code in (("/messages/987654321", 404), ("/no/such/page", 404)):
            console.allow_status(f"{site.url}{path}", code)
            page.goto(path)
            expect(page.get_by_role("heading", name="Not found")).to_be_visible()
            screenshot_fits(page, f"error-{code}", width)
        page.goto(f"/messages/{shown['sent']}")
        expect(page.get_by_text("Remote images were not loaded")).to_have_count(0)
        page.goto(f"/messages/{shown['html']}")
        expect(page.get_by_text("Remote images were not loaded")).to_be_visible()
        expect(page.frame_locator("iframe.body").locator("p")).to_have_text("Hi  there")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_message_page_names_its_id_and_reads_a_partial_delivery_as_a_refusal(
    browser, site, console, shown, width
):
    pk = shown["partly"]
    with staff_tab(browser, site, console, width) as page:
        page.goto(f"/messages/{pk}")
        expect(page).to_have_title(re.compile(rf"^#{pk} Partly"))
        expect(page.get_by_role("heading", level=1)).to_have_text(f"#{pk} Partly")
        facts = page.locator("#state .facts")
        expect(facts.locator(".status")).to_have_text(["partly delivered"])
        expect(facts.locator(".status-sent")).to_have_count(0)  # no green "sent" over the refusal
        expect(facts.locator("dt", has_text="Last error")).to_have_count(0)
        expect(facts.locator("dd.warn-text")).to_contain_text("gone@example.com: 550 5.7.1")
        expect(page.locator("table.attempts tbody tr td").last).to_contain_text("550 5.7.1")
        page.goto(f"/messages/{shown['sent']}")
        reply = page.locator("table.attempts td.reply")
        expect(reply).to_have_text("OK queued")  # the server's words at the final dot
        for cell in page.locator("#state .facts dd").all() + page.locator("dl.facts dd").all():
            assert cell.inner_text().strip(), "an empty row on the message page"
        if width == 390:
            box = page.locator("table.attempts").bounding_box()
            assert box is not None and box["x"] + box["width"] <= width


def test_a_row_opens_its_message_anywhere_and_the_page_leads_back_to_that_list(
    browser, site, console, shown
):
    with staff_tab(browser, site, console, 1280) as page:
        page.goto("/messages?status=sent&q=example")
        row = page.locator("#rows tr", has_text="Partly")
        expect(row.locator("td.source")).to_have_text("api:shop-backend")
        expect(row.locator("td.id")).to_have_text(f"#{shown['partly']}")
        box = row.locator("td.source").bounding_box()  # not the link: the row leads there
        assert box is not None
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        expect(page).to_have_url(re.compile(rf"/messages/{shown['partly']}\?back="))
        page.get_by_role("link", name="Back to the list").click()
        expect(page).to_have_url(f"{site.url}/messages?status=sent&q=example")
        # The subject stays a real link, for the keyboard and without JavaScript.
        link = row.get_by_role("link", name="Partly")
        link.focus()
        page.keyboard.press("Enter")
        expect(page).to_have_url(re.compile(rf"/messages/{shown['partly']}\?back="))


def test_addresses_are_whole_and_columns_keep_their_widths_across_tabs(
    browser, site, console, shown
):
    with staff_tab(browser, site, console, 1280) as page:
        widths = []
        for tab in ("all", "sent", "failed"):
            page.goto(f"/messages?status={tab}")
            widths.append(page.evaluate(
                "Array.from(document.querySelectorAll('table.messages thead th'))"
                ".map(th => Math.round(th.getBoundingClientRect().width))"
            ))  # fmt: skip
            for address in page.locator("#rows td.to .addr").all():
                # Whole: a short one on one line, a long one wrapped inside its cell.
                cell = address.locator("xpath=ancestor::td[1]")
                assert cell.evaluate("td => td.scrollWidth <= td.clientWidth"), "cut off"
                box = address.bounding_box()
                assert box is not None
                if len(address.inner_text()) <= 20:
                    assert box["height"] < 30, "a short address wrapped onto two lines"
        assert widths[0] == widths[1] == widths[2]
        assert widths[0][3] >= 150, widths[0]  # the To column holds a short address whole


def test_send_again_asks_first_and_the_copy_and_the_original_name_each_other(
    browser, site, console, shown
):
    pk = shown["sent"]
    with staff_tab(browser, site, console, 1280) as page:
        page.goto(f"/messages/{pk}")
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.get_by_role("button", name="Send again").click()
        expect(page).to_have_url(f"{site.url}/messages/{pk}")
        assert asked and asked[0].startswith(f"Send message #{pk} again?")
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Send again").click()
        expect(page).not_to_have_url(f"{site.url}/messages/{pk}")
        copy = int(page.url.rsplit("/", 1)[1])
        facts = page.locator("#state .facts")
        expect(facts).to_contain_text(re.compile(rf"Sent again from\s*#{pk}\b"))
        facts.get_by_role("link", name=f"#{pk}").click()
        expect(page).to_have_url(f"{site.url}/messages/{pk}")
        expect(page.locator("#state .facts")).to_contain_text(
            re.compile(rf"Sent again as\s*#{copy}\b")
        )
        assert settled(site, copy) == {copy: "sent"}


def test_without_javascript_send_again_goes_through_a_confirmation_page(
    browser, site, console, shown
):
    pk = shown["html"]
    with staff_tab(browser, site, console, 390, javascript=False) as page:
        page.goto(f"/messages/{pk}")
        page.get_by_role("button", name="Send again").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Send message #{pk} again?")
        screenshot_fits(page, "confirm", 390)
        page.get_by_role("link", name="No, go back").click()
        expect(page).to_have_url(f"{site.url}/messages/{pk}")
        with site.app.app_context():
            copies = select(Message.id).where(Message.resent_from == pk)
            assert db.session.execute(copies).all() == []
        page.get_by_role("button", name="Send again").click()
        page.get_by_role("button", name=f"Yes, send message #{pk} again").click()
        expect(page.locator("#state .facts")).to_contain_text(
            re.compile(rf"Sent again from\s*#{pk}\b")
        )


def test_bulk_resend_does_what_each_row_allows_asks_first_and_says_how_many(
    browser, site, console, shown
):
    site.smtp.recorder.rcpt_replies["gone@example.com"] = "550 5.7.1 refused by policy"
    try:
        more = store(site, "gone@example.com", "Bounced too")
        assert settled(site, more) == {more: "failed"}
    finally:
        site.smtp.recorder.rcpt_replies.clear()
    later = store(site, "later@example.com", "Tomorrow", send_after="2999-01-01T00:00:00")
    with staff_tab(browser, site, console, 390) as page:
        page.goto("/messages")
        for pk in (more, shown["failed"], shown["sent"]):
            page.get_by_role("checkbox", name=f"Choose message #{pk}").check()
        # The list refreshes itself while "Tomorrow" is queued, but not over a choice.
        page.wait_for_timeout(2500)
        expect(page.get_by_role("checkbox", name=f"Choose message #{more}")).to_be_checked()
        site.smtp.recorder.delay = 1.0
        try:
            page.once("dialog", lambda dialog: dialog.accept())
            page.get_by_role("button", name="Resend chosen").click()
            expect(page.locator("#notice .notice")).to_contain_text(
                "2 messages queued again. 1 left as it was: not failed or cancelled."
            )
        finally:
            site.smtp.recorder.delay = 0
        screenshot_fits(page, "outbox-bulk", 390)
        assert settled(site, more, shown["failed"]) == {more: "sent", shown["failed"]: "sent"}
        page.get_by_role("checkbox", name=f"Choose message #{later}").check()
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel chosen").click()
        expect(page.locator("#notice .notice")).to_contain_text("1 message cancelled.")


RAW = (
    b"From: Shop <shop@example.com>\r\nTo: ann@example.com\r\nSubject: Raw receipt\r\n"
    b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b1"\r\n\r\n'
    b'--b1\r\nContent-Type: multipart/alternative; boundary="b2"\r\n\r\n'
    b"--b2\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nThe plain receipt\r\n"
    b"--b2\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>The <b>HTML</b> receipt</p>\r\n"
    b"--b2--\r\n--b1\r\nContent-Type: text/csv\r\n"
    b'Content-Disposition: attachment; filename="lines.csv"\r\n\r\na,b\r\n--b1--\r\n'
)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_mail_handed_over_by_smtp_shows_its_bodies_and_downloads_as_it_came(
    browser, site, console, width
):
    with site.app.app_context():
        queued = queue_raw("shop@example.com", ["ann@example.com"], RAW, source="smtp:shop")
    assert settled(site, queued.id) == {queued.id: "sent"}
    with staff_tab(browser, site, console, width) as page:
        page.goto(f"/messages/{queued.id}")
        expect(page.get_by_role("heading", level=1)).to_have_text(f"#{queued.id} Raw receipt")
        expect(page.locator("pre.body")).to_have_text("The plain receipt\n")
        frame = page.frame_locator("iframe.body")
        expect(frame.locator("b")).to_have_text("HTML")
        expect(page.locator("ul.attachments")).to_contain_text("lines.csv")
        expect(page.locator("dl.facts").first).to_contain_text("by smtp:shop")
        screenshot_fits(page, "raw-message", width)
        with page.expect_download() as download:
            page.get_by_role("link", name="Download the mail (.eml)").click()
        path = download.value.path()
        assert path.read_bytes().endswith(RAW)
        assert download.value.suggested_filename == f"outbox-{queued.id}.eml"


def png(width: int, height: int, rgb: bytes) -> bytes:
    """A PNG of one colour, made by hand: a browser must decode it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    rows = b"".join(b"\0" + rgb * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
def test_the_html_body_shows_its_inline_image_and_nothing_remote(browser, site, console, width):
    logo = base64.b64encode(png(3, 2, b"\xcc\x22\x11")).decode()
    html = ('<p>Order</p><img id="logo" src="cid:logo@shop.example" alt="Shop">'
            '<img id="pixel" src="https://tracker.example/p.gif" alt="">')  # fmt: skip
    attachments = [
        {"filename": "logo.png", "content": logo, "content_id": "logo@shop.example"},
        {"filename": "b.png", "content": logo, "content_id": "x" * 240 + "@a.b"},
    ]
    queued = store(site, "ann@example.com", "Inline logo", html=html, attachments=attachments,
                   metadata={"order": "4711", "note": "y" * 1000})  # fmt: skip
    assert settled(site, queued) == {queued: "sent"}
    with staff_tab(browser, site, console, width) as page:
        page.goto(f"/messages/{queued}")
        frame = page.frame_locator("iframe.body")
        expect(frame.locator("p")).to_have_text("Order")
        shown = frame.locator("#logo")
        expect(shown).to_have_js_property("complete", True)
        assert shown.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [3, 2]
        assert frame.locator("#pixel").evaluate("i => i.naturalWidth") == 0
        expect(page.locator("ul.attachments")).to_contain_text(
            "inline in the HTML as cid:logo@shop.example"
        )
        expect(page.locator("dl.facts").first).to_contain_text("order 4711")
        screenshot_fits(page, "inline-message", width)


def test_on_a_phone_six_cards_fit_a_screen_and_each_opens_its_message(
    browser, site, console, shown
):
    with staff_tab(browser, site, console, 390) as page:
        page.goto("/messages")
        pick = page.locator(f'input[name=ids][value="{shown["html"]}"]')
        card = page.locator("#rows tr", has=pick)  # one recipient, sent
        card.scroll_into_view_if_needed()
        box = card.bounding_box()
        assert box is not None and box["height"] <= 900 / 6, box  # the tab is 900 px high
        for hidden in ("td.id", "td.source", "td.num"):  # on the message's own page
            expect(card.locator(hidden)).to_be_hidden()
        expect(card.locator("td.to")).to_have_text("ann@example.com")
        expect(card.locator(".status")).to_have_text("sent")
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] - 8)
        expect(page).to_have_url(re.compile(rf"/messages/{shown['html']}\?back="))
        expect(page.locator("main")).to_contain_text("api:")  # the source, there
