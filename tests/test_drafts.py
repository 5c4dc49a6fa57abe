"""Checking a draft without a database: each bad field named, and the address shortcut."""

from email.headerregistry import Address
from email.utils import getaddresses

import pytest
from email_validator import EmailNotValidError, validate_email
from hypothesis import example, given, settings
from hypothesis import strategies as st

from outbox import drafts
from outbox.drafts import DraftError, build_draft, parse_addresses


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
    shortcut = drafts._plain(value)
    if shortcut is not None:
        assert [shortcut] == full_check(value)
    assert (parse_addresses([value]) if full_check(value) else None) == full_check(value)


@pytest.mark.parametrize("value", ["rcpt@example.com", "First.Last+tag@Mail.Example.ORG",
                                   "a_b-c@x-y.example"])  # fmt: skip
def test_plain_addresses_take_the_shortcut(value):
    assert drafts._plain(value) is not None


@pytest.mark.parametrize("value", ["Ann <ann@example.com>", "postmaster@example.com",
                                   "a..b@example.com", "a@localhost", " a@example.com",
                                   "a@example.com, b@example.com", "ü@example.com"])  # fmt: skip
def test_anything_else_takes_the_full_checks(value):
    assert drafts._plain(value) is None


def test_a_bad_default_sender_is_named_on_every_draft():
    for _ in range(2):  # the second answer comes from the cached check
        with pytest.raises(drafts.DraftError) as refused:
            build_draft({"to": "a@example.com", "text": "hi"}, "nobody at example.com")
        assert "default sender is unusable" in refused.value.errors["from"]
    draft = build_draft({"to": "a@example.com", "text": "hi"}, "Shop <shop@example.com>")
    assert draft.from_addr == "Shop <shop@example.com>"


def test_a_remembered_check_gives_the_same_addresses_and_still_refuses():
    named = 'Zoë Ärger <zoe@Example.COM>, "Doe, J" <j@example.com>'
    first = parse_addresses([named])
    assert first == parse_addresses([named]) == [
        "Zoë Ärger <zoe@example.com>", '"Doe, J" <j@example.com>']  # fmt: skip
    for _ in range(2):
        with pytest.raises(ValueError, match="not a valid address"):
            parse_addresses(["Ann <ann@example..com>"])


# A valid message as the API takes it (POST /api/messages hands a JSON body to build_draft
# as it is); each case below makes one field of it wrong.
VALID = {"to": ["rcpt@example.com"], "subject": "Hello", "text": "Hello there"}
DEFAULT_SENDER = "outbox@example.com"  # the tests' MAIL_DEFAULT_SENDER (conftest.base_config)

BAD_FIELDS = [
    ({"to": ["not an address"]}, "to"),
    ({"to": "a@example.com, @example.com"}, "to"),
    ({"cc": ["bob@"]}, "cc"),
    ({"bcc": "x@example..com"}, "bcc"),
    ({"from": "outbox at example.com"}, "from"),
    ({"from": "a@example.com, b@example.com"}, "from"),
    ({"reply_to": "nobody"}, "reply_to"),
    ({"to": ["rcpt@example.com\r\nBcc: victim@example.com"]}, "to"),
    ({"cc": "cc@example.com\nBcc: victim@example.com"}, "cc"),
    ({"bcc": "b@example.com\rX: y"}, "bcc"),
    ({"from": "outbox@example.com\r\nBcc: victim@example.com"}, "from"),
    ({"reply_to": "help@example.com\nBcc: victim@example.com"}, "reply_to"),
    ({"subject": "Hi\r\nBcc: victim@example.com"}, "subject"),
    ({"subject": "Hi\nthere"}, "subject"),
    ({"subject": "x" * 999}, "subject"),
    ({"from": "N" * 990 + " <outbox@example.com>"}, "from"),
    ({"headers": {"X-Tag": "a\r\nBcc: victim@example.com"}}, "headers"),
    ({"headers": {"Bcc": "victim@example.com"}}, "headers"),
    ({"headers": {"Message-ID": "<fixed@example.com>"}}, "headers"),
    ({"headers": {"X-Bad:Name": "1"}}, "headers"),
    ({"headers": ["X-Tag: 1"]}, "headers"),
    ({"headers": "X-Tag: 1"}, "headers"),
    ({"to": []}, "to"),
    ({"to": ""}, "to"),
    ({"text": "", "html": None}, "text"),
    ({"send_after": "tomorrow"}, "send_after"),
    ({"send_after": "0001-01-01T00:00:00+01:00"}, "send_after"),
    ({"priority": "high"}, "priority"),
    ({"priority": 1.5}, "priority"),
    ({"attachments": [{"filename": "a.txt", "content": "not base64!"}]}, "attachments"),
    ({"attachments": [{"filename": "a\r\n.txt", "content": "aGk="}]}, "attachments"),
    ({"attachments": [{"filename": "a", "content_type": "text/" + "x" * 300, "content": ""}]},
     "attachments"),
]  # fmt: skip


@pytest.mark.parametrize("change, field", BAD_FIELDS)
def test_bad_field_is_refused_naming_it(change, field):
    with pytest.raises(DraftError) as refused:
        build_draft({**VALID, **change}, DEFAULT_SENDER)
    assert set(refused.value.errors) == {field}
