"""The staff console in Chromium: actions answer in place, the grouped navigation, dark mode."""

import pytest
from playwright.sync_api import expect

from outbox.capabilities.suppression import manage
from outbox.models.db import db
from outbox.ops import pause
from tests.support.browser import WIDTHS, fits, go_to, same_document, settled, staff_tab, store

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]

AT_ONCE = 3_000  # ms: less than the dashboard's refresh (5 s), so only the answer can do it

# The contrast ratio (WCAG) of an element's text colour against the first background behind
# it that is not transparent.
CONTRAST = """(element) => {
  const rgb = (value) => value.match(/[\\d.]+/g).map(Number);
  const linear = (c) => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  const lum = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  const clear = (e) => getComputedStyle(e).backgroundColor === "rgba(0, 0, 0, 0)";
  let back = element;
  while (back && clear(back)) { back = back.parentElement; }
  const fg = lum(rgb(getComputedStyle(element).color));
  const bg = lum(rgb(back ? getComputedStyle(back).backgroundColor : "rgb(255, 255, 255)"));
  return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
}"""


def failed_to_suppressed(site, address: str) -> int:  # type: ignore[no-untyped-def]
    """A failed message whose only recipient is then put on the suppression list."""
    site.smtp.recorder.rcpt_replies[address] = f"550 5.7.1 <{address}>: refused by policy"
    try:
        pk = store(site, address, f"Refused {address}")
        assert settled(site, pk) == {pk: "failed"}
    finally:
        site.smtp.recorder.rcpt_replies.pop(address, None)
    with site.app.app_context():
        manage.add(address, "asked us by phone")
        db.session.remove()
    return pk


@pytest.mark.parametrize("width", WIDTHS)
def test_a_refused_resend_says_why_in_place_on_its_page_and_on_the_dashboard(
    browser, site, console, width, tmp_path
):
    pk = failed_to_suppressed(site, f"gone-{width}@example.com")
    reason = f"every recipient of message {pk} is on the suppression list"
    with staff_tab(browser, site, console, width) as page:
        page.goto(f"/messages/{pk}")
        for path in (f"/messages/{pk}/resend", f"/failures/{pk}/resend"):
            console.allow_status(f"{site.url}{path}", 409)  # the refusal is the test
        notice = page.locator("#notice")
        with same_document(page):
            page.get_by_role("button", name="Resend").click()
            expect(notice).to_contain_text(f"Not possible now: {reason}.")
        expect(notice.locator(".refused")).to_be_visible()
        expect(page.locator("#state .status").first).to_have_text("failed")
        fits(page, width)
        page.screenshot(path=tmp_path / f"refused-message-{width}.png", full_page=True)

        page.goto("/")
        with same_document(page):
            page.locator(f"#resend-{pk}").click()
            expect(notice).to_contain_text(reason)
        expect(page.locator(f"#resend-{pk}")).to_be_visible()  # still failed, still offered
        page.get_by_role("button", name="Dismiss").click()
        expect(notice.locator(".refused")).to_have_count(0)
        page.screenshot(path=tmp_path / f"refused-dashboard-{width}.png", full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_pause_flips_the_button_at_once_and_says_so(browser, site, console, width, tmp_path):
    try:
        with staff_tab(browser, site, console, width) as page:
            page.on("dialog", lambda dialog: dialog.accept())
            with same_document(page):
                page.get_by_role("button", name="Pause sending").click()
                expect(page.get_by_role("button", name="Resume sending")).to_be_visible(
                    timeout=AT_ONCE
                )
                expect(page.locator("#notice")).to_have_text(
                    "Sending is paused: the workers stop claiming messages.×"
                )
                page.screenshot(path=tmp_path / f"paused-{width}.png", full_page=True)
                page.get_by_role("button", name="Resume sending").click()
                expect(page.get_by_role("button", name="Pause sending")).to_be_visible(
                    timeout=AT_ONCE
                )
                expect(page.locator("#notice")).to_contain_text("Sending resumes")
            fits(page, width)
    finally:
        with site.app.app_context():
            pause.resume()


@pytest.mark.parametrize("width", WIDTHS)
def test_resend_all_failed_says_how_many_and_why_the_rest_stay(
    browser, site, console, width, tmp_path
):
    failed_to_suppressed(site, f"all-{width}@example.com")
    with staff_tab(browser, site, console, width) as page:
        with same_document(page):
            page.get_by_label("Yes, queue every failed message again").check()
            page.get_by_role("button", name="Resend all failed").click()
            expect(page.locator("#notice")).to_contain_text("queued again.")
            expect(page.locator("#notice")).to_contain_text(
                "failed: every recipient of", timeout=AT_ONCE
            )
        fits(page, width)
        page.screenshot(path=tmp_path / f"resend-all-{width}.png", full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", ("light", "dark"))
def test_the_navigation_is_grouped_a_menu_on_a_phone_one_line_wide_and_readable(
    browser, site, console, width, scheme, tmp_path
):
    with staff_tab(browser, site, console, width) as page:
        page.emulate_media(color_scheme=scheme)
        nav = page.get_by_role("navigation", name="Pages")
        links = ["Dashboard", "Outbox", "Compose", "Mailings", "Suppressions", "Bounces",
                 "Domains", "Routes", "Accounts", "Tokens", "Webhooks", "Audit"]  # fmt: skip
        menu = page.locator("details.menu > summary")
        if width < 721:
            expect(page.get_by_role("link", name="Outbox", exact=True)).to_be_hidden()
            menu.click()
            page.screenshot(path=tmp_path / f"menu-{scheme}-{width}.png", full_page=True)
        else:
            expect(menu).to_be_hidden()
            tops = {round(nav.get_by_role("link", name=n, exact=True).bounding_box()["y"])
                    for n in links}  # fmt: skip
            assert len(tops) == 1, f"the links wrap onto {len(tops)} lines"
            user = page.locator(".sign-out").bounding_box()
            assert user["y"] < 40, "Sign out is not on the header's line"
            last = nav.get_by_role("link", name="Audit", exact=True).bounding_box()
            assert last["x"] + last["width"] <= user["x"], "the links run into the user"
        for group in ("Mail", "Deliverability", "Admin"):
            expect(nav.get_by_role("group", name=group)).to_have_count(1)
        for name in links:
            expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
        assert (
            nav.get_by_role("link", name="Dashboard", exact=True).get_attribute("aria-current")
            == "page"
        )
        fits(page, width)
        for selector in ("h1", ".tile-name", ".top nav a", "table.list th"):
            ratio = page.locator(selector).first.evaluate(CONTRAST)
            assert ratio >= 4.5, f"{selector} in {scheme}: contrast {ratio:.2f}"
        dark = page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
        assert dark == (scheme == "dark")
        page.screenshot(path=tmp_path / f"dashboard-{scheme}-{width}.png", full_page=True)
        nav.get_by_role("link", name="Suppressions", exact=True).click()
        expect(page.get_by_role("heading", name="Suppression list")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_admin_pages_fit_and_the_audit_detail_reads_as_words(
    browser, site, console, width, tmp_path
):
    failed_to_suppressed(site, f"audit-{width}@example.com")
    with staff_tab(browser, site, console, width) as page:
        page.get_by_label("Yes, queue every failed message again").check()
        page.get_by_role("button", name="Resend all failed").click()
        expect(page.locator("#notice")).to_contain_text("queued again.")
        for name in ("Accounts", "Tokens", "Audit"):
            go_to(page, name)
            expect(page.locator('nav a[aria-current="page"]')).to_have_text(name)
            fits(page, width)
            page.screenshot(path=tmp_path / f"{name.lower()}-{width}.png", full_page=True)
        row = page.locator("table.audit tbody tr", has_text="resend all").first
        expect(row.locator("td[data-label='Detail']")).to_have_text("requeued: 0")
