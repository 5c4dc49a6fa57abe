"""In Chromium, what sits at the edges of the message page: a huge crafted HTML body and
attachments whose names are not Latin-1."""

import base64

import pytest

from . import test_browser as shared
from .test_browser import LIVE, Site, staff_tab
from .test_browser_pages import settled, store

# The shared fixtures, as this module's own (one live site, worker and browser per module).
browser, chromium, clean_console, console, site = (
    shared.browser, shared.chromium, shared.clean_console, shared.console, shared.site
)  # fmt: skip

try:
    from playwright.sync_api import Request, expect
except ImportError:  # test_browser skipped the module already
    pass

pytestmark = pytest.mark.browser

MIB = 1024 * 1024


def test_a_crafted_5_mib_html_body_shows_in_part_and_loads_nothing_remote(browser, site: Site,
                                                                          console):  # fmt: skip
    html = ('<p id="top">Top of the letter</p><img id="pixel" src="https://tracker.example/p.gif">'
            '<p style="background: url(//cdn.example/bg.png)">styled</p>')  # fmt: skip
    html += "src=a " * (5 * MIB // 6)
    queued = store(site, "ann@example.com", "Crafted", html=html)
    assert settled(site, queued) == {queued: "sent"}
    elsewhere: list[str] = []

    def watch(request: Request) -> None:
        if not request.url.startswith((site.url, "data:")):
            elsewhere.append(request.url)

    with staff_tab(browser, site, console, 1280) as page:
        page.on("request", watch)
        page.goto(f"/messages/{queued}", timeout=LIVE)
        expect(page.get_by_role("note").first).to_have_text(
            f"This HTML body is {len(html):,} characters long: the page shows its first "
            f"{1024 * 1024:,}."
        )
        expect(page.get_by_role("note").nth(1)).to_contain_text("Remote images were not loaded")
        frame = page.frame_locator("iframe.body")
        expect(frame.locator("#top")).to_have_text("Top of the letter", timeout=LIVE)
        assert frame.locator("#pixel").evaluate("i => i.naturalWidth") == 0
        assert frame.locator("#pixel").get_attribute("src") is None
    assert elsewhere == []


NAMES = ["файл.txt", "日本語.png", "📎 notes.txt", "Grüße.pdf", "plain report.csv"]


def test_attachments_download_under_their_own_names_whatever_the_script(browser, site, console):
    files = [{"filename": name, "content": base64.b64encode(f"file {n}".encode()).decode()}
             for n, name in enumerate(NAMES)]  # fmt: skip
    queued = store(site, "ann@example.com", "Names", attachments=files)
    assert settled(site, queued) == {queued: "sent"}
    with staff_tab(browser, site, console, 1280) as page:
        page.goto(f"/messages/{queued}")
        for n, name in enumerate(NAMES):
            with page.expect_download() as download:
                page.locator("ul.attachments a").nth(n).click()
            assert download.value.suggested_filename == name
            assert download.value.path().read_bytes() == f"file {n}".encode()
