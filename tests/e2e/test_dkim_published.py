"""outbox dkim check: each key's TXT record read from a real DNS server (dnslib, over UDP
and TCP for records past 512 octets) serving the zone lines `outbox dkim add` printed,
and held to the key: published, missing, another key's, revoked, doubled, unanswered."""

import socket

import pytest

from outbox.capabilities.dkim import keys, published
from outbox.models import utcnow
from tests.support.dns import txt


def add(domain: str, selector: str, kind: str = "rsa", bits: int = 2048) -> keys.DkimKey:
    return keys.add(domain, selector, kind, bits, utcnow())


def check(runner, *domains: str):  # type: ignore[no-untyped-def]
    return runner.invoke(args=["dkim", "check", *domains])


@pytest.mark.all_databases
def test_the_records_dkim_add_prints_check_out_over_udp_and_tcp(app, runner, serve, heard):
    # The RSA-4096 record (about 800 octets) is past a UDP answer's 512: DNS says truncated
    # and the lookup goes again over TCP.
    made = [add("example.com", "s1"), add("example.com", "ed", "ed25519"),
            add("faß.example", "big", bits=4096)]  # fmt: skip
    serve([keys.zone_line(key) for key in made])
    result = check(runner)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "ok    ed._domainkey.example.com.",
        "ok    s1._domainkey.example.com.",
        "ok    big._domainkey.xn--fa-hia.example.",
    ]
    assert heard.protocols == ["udp", "udp", "udp", "tcp"]  # the big one again over TCP
    assert check(runner, "faß.example").output == "ok    big._domainkey.xn--fa-hia.example.\n"


def test_each_wrong_record_is_named_and_the_check_fails(app, runner, serve):
    stale, other = add("example.com", "stale"), keys.make_pair("rsa")
    revoked, doubled = add("example.com", "revoked"), add("example.com", "twice")
    mismatched = add("example.com", "kind", "ed25519")
    add("example.com", "spf"), add("example.com", "missing")
    kind_wrong = keys.zone_line(mismatched).replace("k=ed25519", "k=rsa")
    serve([
        txt("stale._domainkey.example.com.", f"v=DKIM1; k=rsa; p={other.public}"),
        txt("revoked._domainkey.example.com.", "v=DKIM1; p="),
        keys.zone_line(doubled),
        txt(keys.record_name(doubled), keys.record_value(doubled).replace("p=", "p=AAAA")),
        kind_wrong,
        txt("spf._domainkey.example.com.", "v=spf1 -all"),
    ])  # fmt: skip
    result = check(runner, "example.com")
    assert result.exit_code == 1
    found = dict(line.split(": ", 1) for line in result.output.splitlines())
    assert found == {
        "FAIL  kind._domainkey.example.com.": "the record says k=rsa, the key is ed25519",
        "FAIL  missing._domainkey.example.com.": "no record: the name does not exist in DNS",
        "FAIL  revoked._domainkey.example.com.": "the key is revoked there (empty p=)",
        "FAIL  spf._domainkey.example.com.": "the TXT records there hold no DKIM key (no p= tag)",
        "FAIL  stale._domainkey.example.com.": found["FAIL  stale._domainkey.example.com."],
        "FAIL  twice._domainkey.example.com.": "2 DKIM records: receivers may take any of them",
    }
    assert found["FAIL  stale._domainkey.example.com."].startswith("the record holds another key")
    assert stale.public_key not in result.output and revoked.selector == "revoked"


def test_a_dns_server_that_never_answers_is_said_so(app, runner, monkeypatch):
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never replies
    silent.bind(("127.0.0.1", 0))
    monkeypatch.setattr(published, "TIMEOUT", 0.5)
    app.config["DNS_RESOLVERS"] = f"127.0.0.1:{silent.getsockname()[1]}"
    add("example.com", "s1")
    try:
        result = check(runner)
    finally:
        silent.close()
    assert result.exit_code == 1
    assert result.output == "FAIL  s1._domainkey.example.com.: DNS gave no answer within 0.5 s\n"


@pytest.mark.parametrize(
    ("setting", "error"),
    [("127.0.0.1:99999", "'127.0.0.1:99999' is not host[:port]"),
     ("dns.example", "'dns.example' is not an IP address")],
)  # fmt: skip
def test_bad_resolvers_and_unknown_domains_are_named(app, runner, setting, error):
    add("example.com", "s1")
    app.config["DNS_RESOLVERS"] = setting
    result = check(runner)
    assert result.exit_code == 1 and f"OUTBOX_DNS_RESOLVERS: {error}" in result.output
    app.config["DNS_RESOLVERS"] = "127.0.0.1:53, [::1]:53"
    assert "no DKIM key for other.example" in check(runner, "other.example").output
