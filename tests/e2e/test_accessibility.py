"""Every page checked by axe-core in Chromium, at phone and desktop width and in dark mode:
no serious or critical finding (the WCAG 2.x A and AA rules axe runs by default)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outbox.capabilities import bulk_jobs, suppression
from outbox.core.filters import parse
from outbox.models.db import db
from tests.support.browser import STAFF, Site, sign_in, store

try:
    from playwright.sync_api import Browser, Page, expect
except ImportError:  # the chromium fixture skips the module's tests
    pass

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("chromium", "clean_console")]

AXE = Path(__file__).parents[1] / "typescript" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = {"serious", "critical"}
# The page as loaded and every fragment htmx was asked for on load swapped in.
SETTLED = "() => !document.querySelector('.htmx-request')"
# The findings of one run, as axe reports them, reduced to what a reader needs.
FINDINGS = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ")),
  }));
}"""


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: npm ci --prefix tests/typescript")
    return AXE.read_text()


@pytest.fixture(scope="module")
def site_with_mail(capture_site: Site) -> Site:
    """The capture-mode site (every page in the menu) with a message of each kind shown,
    and a bulk job over a filter of the list."""
    store(capture_site, "ann@example.com", "A message to look at")
    with capture_site.app.app_context():
        bulk_jobs.start("cancel", parse("to:@example.com"), STAFF[0])
        db.session.remove()
    return capture_site


def findings(page: Page, source: str) -> list[dict[str, Any]]:
    """axe's serious and critical findings on the page as it stands."""
    page.add_script_tag(content=source)
    found: list[dict[str, Any]] = page.evaluate(FINDINGS)
    return [f for f in found if f["impact"] in BLOCKING]


def pages(page: Page) -> list[str]:
    """The paths the menu links to, and one message's page."""
    # Read from the document: on a phone the links sit in the closed menu, out of sight.
    hrefs = "links => links.map(link => link.getAttribute('href'))"
    paths = set(page.eval_on_selector_all("nav[aria-label='Pages'] a", hrefs))
    page.goto("/messages")
    first = page.locator("#rows a[href^='/messages/']").first.get_attribute("href")
    filtered = {"/messages?q=to:@example.com+since:7d", "/messages/jobs/1",
                "/messages/jobs/new?move=cancel&q=to:@example.com"}  # fmt: skip
    # The dashboard's longest chart window as well as its default one.
    more = {first or "", "/messages?status=all", "/no-such-page", "/?window=7d"}
    return sorted(paths | filtered | more - {""})


@pytest.fixture
def tab(browser: "Browser", site_with_mail: Site, console: Any, request: Any) -> Iterator[Page]:
    width, scheme = request.param
    # axe is put into each page as a script of its own, which the pages' CSP refuses.
    context = browser.new_context(base_url=site_with_mail.url, bypass_csp=True,
                                  viewport={"width": width, "height": 900},
                                  color_scheme=scheme)  # fmt: skip
    try:
        page = context.new_page()
        console.watch(page)
        yield page
    finally:
        context.close()


@pytest.mark.parametrize("tab", [(390, "light"), (1280, "light"), (1280, "dark")], indirect=True,
                         ids=["390", "1280", "1280-dark"])  # fmt: skip
def test_every_page_has_no_serious_accessibility_finding(  # type: ignore[no-untyped-def]
    tab: Page, axe_source: str, console, site_with_mail: Site
):
    tab.goto("/sign-in")
    problems = {"/sign-in": findings(tab, axe_source)}
    sign_in(tab, *STAFF)
    expect(tab.get_by_role("heading", name="Dashboard")).to_be_visible()
    paths = pages(tab)
    assert len(paths) >= 12, paths  # the whole menu, a message, the list, an error page
    for path in paths:
        if path == "/no-such-page":
            console.allow_status(f"{site_with_mail.url}{path}", 404)
        tab.goto(path)
        tab.wait_for_function(SETTLED)
        problems[path] = findings(tab, axe_source)
    found = {path: f for path, f in problems.items() if f}
    assert not found, "\n".join(
        f"{path}: {f['impact']} {f['id']} ({f['help']}) at {', '.join(f['nodes'])}"
        for path, each in found.items() for f in each
    )  # fmt: skip


@pytest.mark.parametrize("tab", [(390, "light"), (1280, "dark")], indirect=True,
                         ids=["390", "1280-dark"])  # fmt: skip
def test_the_compose_pages_warning_has_no_serious_accessibility_finding(  # type: ignore[no-untyped-def]
    tab: Page, axe_source: str, site_with_mail: Site
):
    with site_with_mail.app.app_context():
        suppression.add("bounced@example.com", "550 5.1.1 no such user", "bounce")
        db.session.commit()
        db.session.remove()
    tab.goto("/sign-in")
    sign_in(tab, *STAFF)
    tab.goto("/messages/new")
    tab.get_by_label("To", exact=True).fill("bounced@example.com")
    tab.get_by_label("Text body", exact=True).fill("Hi")  # To left: checked as it is
    expect(tab.locator("#suppressed-check")).to_contain_text("bounced@example.com")
    hinted = findings(tab, axe_source)
    tab.get_by_role("button", name="Send", exact=True).click()
    expect(tab.locator("#suppressed-warning")).to_be_visible()
    warned = findings(tab, axe_source)
    assert not hinted and not warned, (hinted, warned)
