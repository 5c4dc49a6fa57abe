"""The domain doctor's pure parts: SPF terms and look-up counting, DMARC records, the
organisational domain and alignment."""

import ipaddress

import pytest

from outbox.capabilities.domains import dmarc, settings, spf


def zone(records: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    return lambda name: records.get(name, [])


def test_spf_terms_parse_with_their_qualifiers_values_and_modifiers():
    terms = spf.parse(
        "v=spf1 ip4:192.0.2.0/24 -ip6:2001:db8::/32 a mx/24 ~include:_spf.example "
        "?exists:%{i}.x.example redirect=other.example exp=why.example -all"
    )
    assert [(t.result, t.name, t.value, t.modifier) for t in terms] == [
        ("pass", "ip4", "192.0.2.0/24", False), ("fail", "ip6", "2001:db8::/32", False),
        ("pass", "a", "", False), ("pass", "mx", "/24", False),
        ("softfail", "include", "_spf.example", False),
        ("neutral", "exists", "%{i}.x.example", False),
        ("pass", "redirect", "other.example", True), ("pass", "exp", "why.example", True),
        ("fail", "all", "", False),
    ]  # fmt: skip
    assert [t.name for t in terms if t.costs_lookup] == ["a", "mx", "include", "exists", "redirect"]


@pytest.mark.parametrize(
    ("record", "said"),
    [("v=spf2 -all", "does not start with v=spf1"), ("v=spf1 ip4:300.1.1.1 -all", "not an IP"),
     ("v=spf1 ip4:2001:db8::1", "not an IPv4"), ("v=spf1 include -all", "needs a domain"),
     ("v=spf1 allow -all", "not an SPF mechanism"), ("v=spf1 -redirect=x.example", "qualifier"),
     ("v=spf1 redirect=a.example redirect=b.example", "more than once"),
     ("v=spf1 all:x", "takes no value")],
)  # fmt: skip
def test_a_record_that_does_not_parse_names_why(record, said):
    with pytest.raises(spf.Malformed, match=said):
        spf.parse(record)


def test_lookups_count_over_includes_and_redirects_and_loops_are_found():
    records = zone({
        "example.com": ["v=spf1 include:a.example include:b.example mx -all", "other text"],
        "a.example": ["v=spf1 a ip4:192.0.2.1 -all"],
        "b.example": ["v=spf1 redirect=c.example"],
        "c.example": ["v=spf1 exists:x.example ptr -all"],
        "loop.example": ["v=spf1 include:back.example -all"],
        "back.example": ["v=spf1 include:loop.example -all"],
    })  # fmt: skip
    walked = spf.walk("example.com", records)
    assert (walked.lookups, walked.loops, walked.error) == (7, [], None)
    assert spf.walk("loop.example", records).loops == [
        "loop.example -> back.example -> loop.example"
    ]
    many = zone({"many.example": ["v=spf1 " + " ".join(f"a:h{n}.example" for n in range(11))]})
    assert spf.walk("many.example", many).lookups == 11


def test_a_missing_include_and_two_records_are_errors():
    records = zone({"x.example": ["v=spf1 include:gone.example -all"],
                    "two.example": ["v=spf1 -all", "v=spf1 a -all"]})  # fmt: skip
    assert spf.walk("x.example", records).error == "gone.example (from x.example) has no SPF record"
    with pytest.raises(spf.Malformed, match="2 SPF records"):
        spf.record_of("two.example", records)


def test_an_address_is_authorised_by_the_first_matching_term_in_order():
    records = zone({
        "example.com": ["v=spf1 -ip4:192.0.2.9 include:relay.example mx ~all"],
        "relay.example": ["v=spf1 ip4:198.51.100.0/24 -all"],
        "redirected.example": ["v=spf1 redirect=example.com"],
        "loop.example": ["v=spf1 include:loop.example -all"],
        "cidr.example": ["v=spf1 mx:example.com/24 a:v6.example//112 -all"],
    })  # fmt: skip
    addresses = zone({"mx1.example.com": ["203.0.113.7"], "v6.example": ["2001:db8::1:1"]})
    exchanges = zone({"example.com": ["mx1.example.com"]})

    def result(domain: str, ip: str) -> str:
        return spf.authorises(domain, ipaddress.ip_address(ip), records, addresses, exchanges)

    assert result("example.com", "198.51.100.20") == "pass"  # through the include
    assert result("example.com", "203.0.113.7") == "pass"  # the MX host's address
    assert result("example.com", "192.0.2.9") == "fail"  # the -ip4 comes first
    assert result("example.com", "192.0.2.10") == "softfail"
    assert result("redirected.example", "203.0.113.7") == "pass"
    assert result("loop.example", "192.0.2.9") == "permerror"
    assert result("cidr.example", "203.0.113.99") == "pass"  # mx/24
    assert result("cidr.example", "2001:db8::1:2") == "pass"  # a:host//112
    assert result("cidr.example", "2001:db8::2:2") == "fail"
    assert result("none.example", "192.0.2.9") == "none"


@pytest.mark.parametrize(
    ("domain", "organisational"),
    [("example.com", "example.com"), ("mail.example.com", "example.com"),
     ("a.b.shop.co.uk", "shop.co.uk"), ("news.shop.com.au", "shop.com.au"),
     ("x.example.de", "example.de"), ("Mail.Example.COM.", "example.com"),
     ("co.uk", "co.uk"), ("localhost", "localhost")],
)  # fmt: skip
def test_the_organisational_domain_follows_the_documented_rule(domain, organisational):
    assert dmarc.organisational(domain) == organisational


def test_alignment_is_relaxed_by_organisational_domain_and_strict_by_equality():
    assert dmarc.aligned("mail.example.com", "example.com", strict=False)
    assert not dmarc.aligned("mail.example.com", "example.com", strict=True)
    assert dmarc.aligned("EXAMPLE.com.", "example.com", strict=True)
    assert not dmarc.aligned("example.net", "example.com", strict=False)
    assert not dmarc.aligned("shop.co.uk", "other.co.uk", strict=False)


def test_dmarc_records_parse_and_those_receivers_discard_say_why():
    record = dmarc.parse("v=DMARC1; p=Reject; sp=none; adkim=s; rua=mailto:d@example.com")
    assert record == dmarc.Record("reject", "none", True, False, "mailto:d@example.com")
    assert dmarc.parse("v=DMARC1;p=none").dkim_strict is False
    for text, said in (("p=reject; v=DMARC1", "start with v=DMARC1"), ("v=DMARC1", "no p="),
                       ("v=DMARC1; p=block", "p=block"), ("v=DMARC1; p=none; adkim=x", "adkim=x"),
                       ("v=DMARC1; p=none; sp=all", "sp=all")):  # fmt: skip
        with pytest.raises(dmarc.Malformed, match=said):
            dmarc.parse(text)
    assert dmarc.is_dmarc("v=DMARC1 ; p=none") and not dmarc.is_dmarc("v=spf1 -all")


@pytest.mark.parametrize("name", ["DOMAINS_CACHE", "DOMAINS_DNS_TIMEOUT"])
def test_times_of_zero_are_refused(name):
    config = {"DOMAINS_CACHE": 300.0, "DOMAINS_DNS_TIMEOUT": 3.0}
    settings.check(config)
    with pytest.raises(ValueError, match=f"{name} must be above 0"):
        settings.check({**config, name: 0})
