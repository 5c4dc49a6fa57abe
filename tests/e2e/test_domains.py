"""The domain doctor against a real DNS server (dnslib, UDP and TCP) serving zones the tests
write, good and broken: an SPF loop, 11 look-ups, two DMARC records, p=reject with
misaligned DKIM, no MX; through `outbox domains check`, the API, the page and Chromium."""

import json
import socket

import pytest
from dnslib import DNSRecord

from outbox.auth import tokens
from outbox.capabilities import routes
from outbox.capabilities.dkim import keys
from outbox.capabilities.domains import doctor
from outbox.capabilities.routes.config import table_of
from outbox.models import utcnow
from tests.support.browser import WIDTHS, enqueue, go_to, screenshot_fits, staff_tab
from tests.support.dns import serving, txt

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium fixture skips the browser test
    pass

RELAY = "198.51.100.7"
ROUTES = {"routes": [{"name": "relay", "host": "relay.good.example", "tls": "ssl"},
                     {"name": "backup", "host": RELAY, "tls": "ssl"},
                     {"name": "local", "host": "127.0.0.1", "tls": "none"}]}  # fmt: skip
GOOD_DMARC = "v=DMARC1; p=reject; rua=mailto:dmarc@good.example"


def good(domain: str, key: keys.DkimKey | None = None) -> list[str]:
    """The records of a domain every check finds right."""
    found = [txt(f"{domain}.", f"v=spf1 ip4:{RELAY} -all"),
             txt(f"_dmarc.{domain}.", GOOD_DMARC.replace("good.example", domain)),
             f"{domain}. IN MX 10 mx.{domain}."]  # fmt: skip
    return found + ([keys.zone_line(key)] if key else [])


@pytest.fixture
def routed(app):  # type: ignore[no-untyped-def]
    """Three routes: one by name (relay.good.example is RELAY), one by address, one local."""
    app.extensions[routes.KEY] = table_of(ROUTES, app.config, {})
    return app


def send_from(make_message, *domains: str) -> None:  # type: ignore[no-untyped-def]
    for domain in domains:
        make_message(from_addr=f"shop@{domain}")


def add_key(domain: str) -> keys.DkimKey:
    return keys.add(domain, "s1", "ed25519", 0, utcnow())


def verdicts(report: dict) -> dict[str, dict[str, str]]:
    return {d["domain"]: {c["name"]: c["verdict"] for c in d["checks"]} for d in report["domains"]}


def whys(report: dict, domain: str) -> dict[str, str]:
    found = next(d for d in report["domains"] if d["domain"] == domain)
    return {c["name"]: c["why"] for c in found["checks"]}


@pytest.mark.all_databases
def test_each_broken_zone_is_named_and_the_command_fails(routed, runner, make_message, serve):
    send_from(make_message, "good.example", "loop.example", "many.example", "twice.example",
              "news.strict.example", "nomx.example")  # fmt: skip
    good_key, strict_key = add_key("good.example"), add_key("strict.example")
    lookups = " ".join(f"a:h{n}.many.example" for n in range(11))
    serve([
        *good("good.example", good_key), f"relay.good.example. IN A {RELAY}",
        txt("_mta-sts.good.example.", "v=STSv1; id=20260101"),
        txt("_smtp._tls.good.example.", "v=TLSRPTv1; rua=mailto:tls@good.example"),
        *good("loop.example")[1:], txt("loop.example.", "v=spf1 include:loop2.example -all"),
        txt("loop2.example.", "v=spf1 include:loop.example -all"),
        *good("many.example")[1:], txt("many.example.", f"v=spf1 {lookups} -all"),
        *good("twice.example"), txt("_dmarc.twice.example.", "v=DMARC1; p=none"),
        *good("news.strict.example")[::2], txt("strict.example.", f"v=spf1 ip4:{RELAY} -all"),
        keys.zone_line(strict_key),
        txt("_dmarc.strict.example.", "v=DMARC1; p=reject; adkim=s"),
        *good("nomx.example")[:2],
    ])  # fmt: skip
    result = runner.invoke(args=["domains", "check", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert verdicts(report) == {
        "good.example": {"SPF": "ok", "DKIM": "ok", "DMARC": "ok", "MX": "ok", "MTA-STS": "ok",
                         "TLS-RPT": "ok"},
        "loop.example": {"SPF": "problem", "DKIM": "warning", "DMARC": "problem", "MX": "ok"},
        "many.example": {"SPF": "problem", "DKIM": "warning", "DMARC": "problem", "MX": "ok"},
        "twice.example": {"SPF": "ok", "DKIM": "warning", "DMARC": "problem", "MX": "ok"},
        "news.strict.example": {"SPF": "ok", "DKIM": "ok", "DMARC": "problem", "MX": "ok"},
        "strict.example": {"SPF": "ok", "DKIM": "ok"},
        "nomx.example": {"SPF": "ok", "DKIM": "warning", "DMARC": "problem", "MX": "problem"},
    }  # fmt: skip
    assert [d["verdict"] for d in report["domains"] if d["domain"] == "good.example"] == ["ok"]
    assert (
        whys(report, "good.example")["SPF"]
        == "parses, 0 look-ups of 10; authorises 2 route address(es)"
    )
    assert whys(report, "loop.example")["SPF"].startswith(
        "the record includes itself (loop.example -> loop2.example -> loop.example)"
    )
    assert whys(report, "many.example")["SPF"].startswith("11 DNS look-ups over its includes")
    assert whys(report, "twice.example")["DMARC"].startswith("2 DMARC records at _dmarc.twice")
    strict = whys(report, "news.strict.example")["DMARC"]
    assert strict.startswith("p=reject at _dmarc.strict.example; DKIM d=strict.example does "
                             "not align (strict)")  # fmt: skip
    assert "without aligned DKIM" in strict
    assert whys(report, "nomx.example")["MX"].startswith("no MX and no address")
    assert whys(report, "loop.example")["DMARC"].startswith("p=reject at _dmarc.loop.example; "
                                                            "no DKIM signature")  # fmt: skip
    assert "127.0.0.1 is this machine" in " ".join(report["notes"])
    assert report["notes"][-1] == doctor.NO_PTR


def test_a_relay_spf_leaves_out_and_a_good_domain_pass_by_exit_status(
    routed, runner, make_message, serve
):
    send_from(make_message, "good.example")
    key = add_key("good.example")
    records = good("good.example", key)
    serve([txt("good.example.", "v=spf1 ip4:192.0.2.1 ~all"), *records[1:],
           f"relay.good.example. IN A {RELAY}"])  # fmt: skip
    result = runner.invoke(args=["domains", "check"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == "good.example (dkim, from): PROBLEM"
    assert lines[1].startswith("  SPF       problem  the record does not authorise the servers "
                               "outbox sends through: route relay (relay.good.example, "
                               f"{RELAY}) gets softfail; route backup")  # fmt: skip
    assert lines[3] == (f'            publish  good.example. IN TXT "v=spf1 ip4:{RELAY} '
                        'ip4:192.0.2.1 ~all"')  # fmt: skip
    serve([*records, f"relay.good.example. IN A {RELAY}"])
    result = runner.invoke(args=["domains", "check"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "good.example (dkim, from): OK"


def test_the_bounce_domain_gets_the_spf_and_mx_checks(routed, runner, make_message, serve):
    routed.config["BOUNCE_ADDRESS"] = "bounces@mail.good.example"
    send_from(make_message, "good.example")
    key = add_key("good.example")
    serve([*good("good.example", key)[1:], txt("mail.good.example.", f"v=spf1 ip4:{RELAY} -all"),
           f"relay.good.example. IN A {RELAY}"])  # fmt: skip
    report = json.loads(runner.invoke(args=["domains", "check", "--json"]).output)
    assert verdicts(report) == {
        "good.example": {"SPF": "warning", "DKIM": "ok", "DMARC": "ok"},
        "mail.good.example": {"SPF": "ok", "MX": "problem"},
    }
    assert whys(report, "good.example")["DMARC"] == ("p=reject at _dmarc.good.example; DKIM "
        "d=good.example aligns (relaxed); envelope mail.good.example aligns (relaxed)")  # fmt: skip


def test_a_dns_server_that_never_answers_is_asked_once_and_every_check_says_so(
    app, runner, make_message
):  # type: ignore[no-untyped-def]
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never replies
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    app.config.update(DNS_RESOLVERS=f"127.0.0.1:{port}", DOMAINS_DNS_TIMEOUT=0.5)
    send_from(make_message, "good.example", "other.example")
    add_key("good.example")
    try:
        result = runner.invoke(args=["domains", "check", "--json"])
        silent.setblocking(False)
        asked = set()
        while True:
            try:
                asked.add(str(DNSRecord.parse(silent.recv(512)).q.qname))
            except BlockingIOError:
                break
    finally:
        silent.close()
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert asked == {"good.example."}  # the first question; after it went unanswered, none
    # Every check of both domains, but the DKIM of other.example, which has no key to look up.
    checks = [(d["domain"], c) for d in report["domains"] for c in d["checks"]]
    assert [c["name"] for _, c in checks] == ["SPF", "DKIM", "DMARC", "MX", "MTA-STS",
                                             "TLS-RPT"] * 2  # fmt: skip
    unasked = {
        (c["verdict"], c["why"]) for d, c in checks if (d, c["name"]) != ("other.example", "DKIM")
    }
    assert unasked == {("problem", "not checked: DNS gave no answer within 0.5 s")}


def test_the_api_and_the_page_show_the_report_and_check_again_in_place(
    routed, signed_in, make_message, serve
):  # type: ignore[no-untyped-def]
    send_from(make_message, "good.example")
    token = tokens.create("reader", scopes=("read",))
    serve([txt("good.example.", "v=spf1 -all"), f"relay.good.example. IN A {RELAY}"])
    headers = {"Authorization": f"Bearer {token}"}
    answer = signed_in.get("/api/domains", headers=headers).get_json()
    assert verdicts(answer)["good.example"]["SPF"] == "problem"
    page = signed_in.get("/domains").get_data(as_text=True)
    assert 'id="domain-good.example"' in page and "v=spf1 -all" in page
    assert 'aria-current="page">Domains</a>' in page
    serve(good("good.example") + [f"relay.good.example. IN A {RELAY}"])
    kept = signed_in.get("/api/domains", headers=headers).get_json()
    assert kept == answer  # within DOMAINS_CACHE: not asked again
    csrf = signed_in.get("/domains").get_data(as_text=True).split('name="csrf_token" value="')[1]
    fragment = signed_in.post("/domains/check", data={"csrf_token": csrf.split('"')[0]},
                              headers={"HX-Request": "true"}).get_data(as_text=True)  # fmt: skip
    assert fragment.strip().startswith('<section id="domains">') and "<html" not in fragment
    assert "check-spf" in fragment and "verdict-ok" in fragment.split("check-spf")[1][:200]
    assert signed_in.post("/domains/check", headers={"HX-Request": "true"}).status_code == 400
    again = verdicts(signed_in.get("/api/domains", headers=headers).get_json())
    assert again["good.example"] == {"SPF": "ok", "DKIM": "warning", "DMARC": "problem", "MX": "ok"}


@pytest.mark.browser
@pytest.mark.usefixtures("chromium", "clean_console")
@pytest.mark.parametrize("width", WIDTHS)
def test_the_domains_page_fits_and_checks_again_in_chromium(browser, site, console, width):
    enqueue(site, "ann@example.org", "Domains")  # from outbox@example.com
    with site.app.app_context():
        key = keys.find("example.com", "s1") or add_key("example.com")
        lines = [*good("example.com", key), txt("_dmarc.example.com.", "v=DMARC1; p=none"),
                 txt("loop.example.", "v=spf1 include:loop.example -all")]  # fmt: skip
    with serving(lines) as broken, serving(lines[:-2]) as fixed:
        with staff_tab(browser, site, console, width) as page:
            site.app.config.update(DNS_RESOLVERS=broken, DOMAINS_CACHE=600)
            site.app.extensions.pop(doctor.KEY, None)  # the other width's round
            go_to(page, "Domains")
            heading = page.get_by_role("heading", name="example.com")
            expect(heading).to_contain_text("problem")  # two DMARC records
            expect(page.locator("tr.check-dmarc")).to_contain_text("2 DMARC records")
            screenshot_fits(page, "domains", width)
            site.app.config["DNS_RESOLVERS"] = fixed  # one DMARC record: seen once asked again
            page.get_by_role("button", name="Check again").click()
            expect(heading).to_contain_text("ok")
            expect(page.locator("tr.check-dmarc")).to_contain_text("p=reject")
            assert page.url.endswith("/domains")  # answered in place
