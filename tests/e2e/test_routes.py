"""Table.choose: the routes a claimed message tries, in order, by the rules; no database."""

from types import SimpleNamespace

import pytest

from outbox import queue, smtp
from outbox.capabilities.routes import Route, Rule, Table, domain_key
from outbox.core.recipients import decode

SETTINGS = smtp.HostSettings("smtp.example.com", 587, 5.0)
RELAY, BACKUP, BULK, LOCAL = (Route(n, SETTINGS) for n in ("relay", "backup", "bulk", "local"))
ROUTES = {r.name: r for r in (RELAY, BACKUP, BULK, LOCAL)}
TABLE = Table(
    ROUTES,
    (
        Rule("local", ("relay",), recipient_domain="Bücher.example"),
        Rule("relay", ("backup", "bulk"), sender_domain="SHOP.example", min_priority=5),
        Rule("bulk", sender_domain="news.example"),
        Rule("backup", min_priority=9),
    ),
)


def mail(*to: str, sender: str = "ann@shop.example", priority: int = 0, **states: str):
    """A claim's mail row: the columns choose() reads."""
    recipients = [{"kind": "to", "address": a} for a in to]
    for entry in recipients:
        if entry["address"] in states:
            entry["state"] = states[entry["address"]]
    return SimpleNamespace(from_addr=sender, recipients=decode(recipients), priority=priority)


def names(routes: tuple[Route, ...]) -> list[str]:
    return [route.name for route in routes]


def test_no_rule_matches_the_first_route_alone():
    assert names(TABLE.choose(mail("bob@example.org"))) == ["relay"]
    assert names(Table(ROUTES).choose(None)) == ["relay"]  # no rules: the mail is not read


def test_a_recipient_domain_matches_in_any_case_and_as_unicode_or_a_labels():
    for address in ("a@bücher.example", "a@BÜCHER.EXAMPLE", "a@xn--bcher-kva.example"):
        assert names(TABLE.choose(mail(address))) == ["local", "relay"], address


def test_a_recipient_domain_matches_only_when_every_recipient_still_to_send_is_there():
    mixed = mail("a@bücher.example", "b@example.org")
    assert names(TABLE.choose(mixed)) == ["relay"]  # the later rules decide; here none matches
    # The recipient of another domain was served already (or suppressed): only those left count.
    served = mail("a@bücher.example", "b@example.org", **{"b@example.org": "sent"})
    assert names(TABLE.choose(served)) == ["local", "relay"]
    suppressed = mail("a@bücher.example", "b@example.org", **{"b@example.org": "suppressed"})
    assert names(TABLE.choose(suppressed)) == ["local", "relay"]


def test_every_condition_of_a_rule_must_hold_and_the_first_matching_rule_wins():
    assert names(TABLE.choose(mail("b@example.org", priority=5))) == ["relay", "backup", "bulk"]
    assert names(TABLE.choose(mail("b@example.org", priority=4))) == ["relay"]
    # The sender's domain in another case; a priority that the last rule also takes.
    assert names(TABLE.choose(mail("b@example.org", sender="x@Shop.Example", priority=9))) == [
        "relay", "backup", "bulk"]  # fmt: skip
    assert names(TABLE.choose(mail("b@example.org", sender="x@news.example"))) == ["bulk"]
    assert names(TABLE.choose(mail("b@example.org", sender="x@other.example", priority=9))) == [
        "backup"]  # fmt: skip
    # A subdomain is another domain.
    assert names(TABLE.choose(mail("b@example.org", sender="x@mail.news.example"))) == ["relay"]


def test_a_table_refuses_a_rule_naming_an_unknown_route_or_no_domain():
    with pytest.raises(ValueError, match="'spare', which is not a route"):
        Table(ROUTES, (Rule("relay", ("spare",)),))
    with pytest.raises(ValueError, match="'a b' is not a domain name"):
        Table(ROUTES, (Rule("relay", sender_domain="a b"),))


def test_domain_names_compare_as_the_suppression_list_keys_them():
    assert domain_key("Bücher.Example.") == "xn--bcher-kva.example"
    assert domain_key("faß.example") == "xn--fa-hia.example"  # IDNA2008: not fass.example
    assert [domain_key(n) for n in ("", " ", "a@b.example", "-a.example", "a..b", 5)] == [None] * 6


def test_a_claimed_rows_mail_is_what_choose_reads(app, make_message):
    make_message(to=["a@bücher.example"], priority=5)
    (claim,) = queue.claim_batch("w1", 10, with_mail=True)
    assert names(TABLE.choose(claim.mail)) == ["local", "relay"]
