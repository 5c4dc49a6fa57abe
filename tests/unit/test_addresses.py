"""Addresses parsed once: the shortcut for plain addresses gives what the full checks give."""

from email.headerregistry import Address
from email.utils import getaddresses

import pytest
from email_validator import EmailNotValidError, validate_email
from hypothesis import example, given, settings
from hypothesis import strategies as st

from outbox.core import addresses
from outbox.core.addresses import Mailbox
from outbox.core.addresses import parse as parse_addresses


def full_check(value: str) -> list[str] | None:
    """What parse_addresses gives for value without its shortcut, or None if it refuses."""
    found = []
    for name, addr in getaddresses([value]):
        if not addr:
            return None
        try:
            checked = validate_email(addr, check_deliverability=False)
        except EmailNotValidError:
            return None
        found.append(str(Address(display_name=name, addr_spec=checked.normalized)))
    return found


LOCAL = st.from_regex(r"[A-Za-z0-9_+.-]{1,70}", fullmatch=True)
LABELS = st.lists(st.from_regex(r"[A-Za-z0-9-]{1,12}", fullmatch=True), min_size=1, max_size=4)
DOMAIN = st.one_of(
    st.builds("{}.{}".format, LABELS.map(".".join), st.sampled_from(["com", "ORG", "de", "x1"])),
    st.from_regex(r"[A-Za-z0-9.-]{1,70}", fullmatch=True),
    st.sampled_from(["example.com", "EXAMPLE.COM", "mail.example.org", "localhost", "test",
                     "a.invalid", "x.local", "b.onion", "1.2.3.4", "a.123", "xn--bcher-kva.example",
                     "xn--zz.example", "a-.example", "-a.example", "a" * 64 + ".example"]),
)  # fmt: skip
PLAINISH = st.one_of(
    st.builds("{}@{}".format, LOCAL, DOMAIN),
    st.builds("{}@{}".format, st.sampled_from(["Postmaster", "abuse", "ABUSE", "x" * 64]), DOMAIN),
)


@settings(max_examples=1000, deadline=None)
@given(PLAINISH)
@example("a@" + "b" * 63 + "." + "c" * 63 + "." + "d" * 63 + ".com")
@example("a" * 64 + "@" + "b" * 63 + "." + "c" * 63 + ".com")
def test_the_shortcut_agrees_with_the_full_checks(value):
    shortcut = addresses._plain(value)
    if shortcut is not None:
        assert [str(shortcut)] == full_check(value)
    parsed = [str(m) for m in parse_addresses([value])] if full_check(value) else None
    assert parsed == full_check(value)


@pytest.mark.parametrize("value", ["rcpt@example.com", "First.Last+tag@Mail.Example.ORG",
                                   "a_b-c@x-y.example"])  # fmt: skip
def test_plain_addresses_take_the_shortcut(value):
    assert addresses._plain(value) is not None


@pytest.mark.parametrize("value", ["Ann <ann@example.com>", "postmaster@example.com",
                                   "a..b@example.com", "a@localhost", " a@example.com",
                                   "a@example.com, b@example.com", "ü@example.com"])  # fmt: skip
def test_anything_else_takes_the_full_checks(value):
    assert addresses._plain(value) is None


def test_a_remembered_check_gives_the_same_addresses_and_still_refuses():
    named = 'Zoë Ärger <zoe@Example.COM>, "Doe, J" <j@example.com>'
    first = parse_addresses([named])
    assert first == parse_addresses([named]) == [
        Mailbox("zoe@example.com", "Zoë Ärger"), Mailbox("j@example.com", "Doe, J")]  # fmt: skip
    for _ in range(2):
        with pytest.raises(ValueError, match="is not an email address: "):
            parse_addresses(["Ann <ann@example..com>"])


def test_a_mailbox_is_written_as_a_person_writes_it():
    assert str(Mailbox("ann@example.com")) == "ann@example.com"
    assert str(Mailbox("j@example.com", "Doe, J")) == '"Doe, J" <j@example.com>'
    assert Mailbox("kunde@example.de", "Kunde").domain == "example.de"


def test_recipients_keep_the_order_given_and_store_as_json_objects():
    to, cc = [Mailbox("b@x.example"), Mailbox("a@x.example", "A")], [Mailbox("c@x.example")]
    entries = addresses.stored(to, cc, [Mailbox("d@x.example")])
    assert entries == [
        {"kind": "to", "address": "b@x.example"},
        {"kind": "to", "address": "a@x.example", "name": "A"},
        {"kind": "cc", "address": "c@x.example"},
        {"kind": "bcc", "address": "d@x.example"},
    ]
    assert [addresses.from_stored(e) for e in entries] == [*to, *cc, Mailbox("d@x.example")]


@pytest.mark.parametrize("value", ["ann@host.local", "Ann <ann@Host.LOCAL>", "b@x.y.local"])
def test_a_special_use_domain_is_taken_only_where_allowed(value):
    with pytest.raises(ValueError, match="special-use.*OUTBOX_ALLOWED_SPECIAL_DOMAINS"):
        parse_addresses([value])
    with pytest.raises(ValueError, match="special-use"):
        parse_addresses([value], frozenset({"test", "onion"}))
    (found,) = parse_addresses([value], frozenset({"local"}))
    assert found.domain.endswith(".local") and found.domain == found.domain.lower()
    # What the check allowed for one caller stays its own: the next is refused again.
    with pytest.raises(ValueError, match="special-use"):
        parse_addresses([value])


def test_allowing_a_special_use_domain_allows_no_other_and_no_bad_address():
    allowed = frozenset({"local"})
    for value in ("a@b.test", "a@b.onion", "a@b.invalid", "a@x.arpa"):
        with pytest.raises(ValueError, match="special-use"):
            parse_addresses([value], allowed)
    for value in ("a@@b.local", "a@b..local", "a b@c.local", "a@-b.local"):
        with pytest.raises(ValueError, match="is not an email address"):
            parse_addresses([value], allowed)


@pytest.mark.parametrize("value", ["bob@", "ann@@example.com", "a@example..com", "x@y.local",
                                   "Ann <ann@>", "@example.com"])  # fmt: skip
def test_every_refused_address_has_one_wording(value):
    with pytest.raises(ValueError) as refused:
        parse_addresses([value])
    assert " is not an email address" in str(refused.value)
    assert str(refused.value).startswith("'")


@pytest.mark.parametrize("value, why", [
    ("<a@example.com> <b@example.org>", "one entry is one address"),
    ("a@example.com <b@example.org>", "holds an @"),
    ("<a@example.com> b@example.org", "one entry is one address"),
    ("a@example.com b@example.org", "one entry is one address"),
    ("g: a@example.com;", "groups"),
    ("(" * 50_000 + "a@example.com", "comments nested more than 5 deep"),
    ("g:" * 50_000 + "a@example.com", "groups"),
    ("a@example.com (x", "is not closed"),
    ('"Ann <a@example.com>', "is not closed"),
    ("Ann <a@example.com", "is not closed"),
    ("a@example.com)", "without its ("),
])  # fmt: skip
def test_an_entry_that_is_not_one_address_is_refused_naming_it(value, why):
    with pytest.raises(ValueError) as refused:
        parse_addresses([value])
    assert why in str(refused.value)
    assert str(refused.value).startswith(repr(value[: addresses.SHOWN_CHARS])[:-1])
    assert len(str(refused.value)) < 500


@settings(max_examples=300, deadline=None)
@given(name=st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=30),
       local=st.from_regex(r"[a-z0-9]{1,10}([.+-][a-z0-9]{1,5})?", fullmatch=True))  # fmt: skip
def test_an_address_written_by_the_email_package_reads_back_as_itself(name, local):
    written = str(Address(display_name=name, addr_spec=f"{local}@example.com"))
    try:
        (found,) = parse_addresses([written])
    except ValueError as exc:  # names the email package writes but does not quote
        assert "line break" in str(exc) or not written.isprintable(), written
        return
    assert found.address == f"{local}@example.com"
    assert found.name == " ".join(name.split()) or found.name == name.strip()


def test_a_mails_own_header_is_read_leniently_for_display():
    values = ["undisclosed-recipients:;", 'Ann <a@example.com>, "B, C" <b@example.org>',
              "team: c@example.com, d@example.com;", "(" * 50_000]  # fmt: skip
    assert addresses.listed(values) == [("Ann", "a@example.com"), ("B, C", "b@example.org")]
