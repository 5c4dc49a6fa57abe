"""Addresses shown whole in Chromium, at phone and desktop width: a 60-character address on
the outbox list, the message page and the dashboard's failures, wrapped, never cut."""

import pytest

from tests.support.browser import WIDTHS, Site, settled, staff_tab, store

try:
    from playwright.sync_api import Page
except ImportError:  # the chromium fixture skips the module's tests
    pass

# chromium first: nothing starts for tests that cannot run.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]

ADDRESS = "accounts.payable.northwest.region@subsidiary-holding.example"
# Each element showing the address: its text, whether it or a box around it that clips
# (overflow other than visible) is narrower than its content, whether it ellipsizes, and
# whether every line of its text lies inside those boxes and the viewport.
WHOLE = """([selector, address]) => Array.from(document.querySelectorAll(selector))
  .filter(e => e.textContent.includes(address))
  .map(e => {
    const range = document.createRange();
    range.selectNodeContents(e);
    const lines = Array.from(range.getClientRects());
    const clipping = [];
    for (let box = e; box && box !== document.body; box = box.parentElement) {
      const style = getComputedStyle(box);
      if (style.overflowX !== "visible" || style.overflowY !== "visible") clipping.push(box);
    }
    const inside = (line, r) => line.left >= r.left - 0.5 && line.right <= r.right + 0.5
      && line.top >= r.top - 0.5 && line.bottom <= r.bottom + 0.5;
    const view = {left: 0, top: -1e9, right: document.documentElement.clientWidth, bottom: 1e9};
    return {
      text: e.textContent,
      clipped: [e, ...clipping].filter(b => b.scrollWidth > b.clientWidth).map(b => b.tagName),
      ellipsis: getComputedStyle(e).textOverflow === "ellipsis",
      outside: lines.filter(line => !inside(line, view)
        || clipping.some(b => !inside(line, b.getBoundingClientRect()))).length,
      lines: lines.length,
    };
  })"""


@pytest.fixture(scope="module")
def failed(site: Site) -> int:
    """A message to the address that its server refused: failed, on the dashboard."""
    site.smtp.recorder.rcpt_replies[ADDRESS] = f"550 5.1.1 <{ADDRESS}>: Recipient unknown"
    try:
        pk = store(site, f"Payables <{ADDRESS}>", "Invoice 12")
        assert settled(site, pk) == {pk: "failed"}
    finally:
        site.smtp.recorder.rcpt_replies.clear()
    return pk


def whole(page: "Page", selector: str) -> list[dict[str, object]]:
    """What WHOLE finds of each element matching selector that shows the address; at least one."""
    found: list[dict[str, object]] = page.evaluate(WHOLE, [selector, ADDRESS])
    assert found, f"no {selector} shows {ADDRESS}"
    for each in found:
        assert ADDRESS in str(each["text"]) and "…" not in str(each["text"]), each
        assert each["clipped"] == [] and not each["ellipsis"] and each["outside"] == 0, each
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_address_is_whole_on_the_list_the_message_page_and_the_dashboard(
    browser, site, console, failed, width
):
    assert len(ADDRESS) == 60
    with staff_tab(browser, site, console, width) as page:
        page.goto("/messages")
        listed = whole(page, "#rows td.to .addr")
        page.goto(f"/messages/{failed}")
        whole(page, ".facts .addr")
        whole(page, "#state table.recipients td.rcpt")
        page.goto("/")
        whole(page, "table.failures td.address .addr")
        if width == 1280:  # the list's To column is narrower than the address: it wraps
            assert all(int(str(found["lines"])) >= 2 for found in listed), listed
