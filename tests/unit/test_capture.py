"""Capture mode's pure parts: the settings, the allowlist's match, a kept mail read for the page."""

from email.message import EmailMessage

import pytest

from outbox import config
from outbox.capabilities.capture import settings, shown
from outbox.capabilities.capture.transport import allowed, mode, on_list


def test_the_allowlist_reads_addresses_and_domains_in_lower_case():
    raw = " QA@Example.com, @Team.Example. ,, "
    assert settings.read_allowed(raw) == frozenset({"qa@example.com", "@team.example"})
    assert config.coerce("DELIVERY_ALLOW", "") == frozenset()


@pytest.mark.parametrize("raw", ["qa", "example.com", "qa@", "@localhost", "a b@example.com"])
def test_an_allowlist_entry_that_is_no_address_nor_domain_is_refused_naming_the_variable(raw):
    said = r"OUTBOX_DELIVERY_ALLOW: expected addresses \(name@example.com\) and domains"
    with pytest.raises(ValueError, match=said):
        config.coerce("DELIVERY_ALLOW", raw)


@pytest.mark.parametrize(("changed", "said"), [
    ({"DELIVERY": "none"}, "must be one of smtp, capture, allowlist, not 'none'"),
    ({"DELIVERY": "allowlist"}, "DELIVERY=allowlist needs DELIVERY_ALLOW"),
    ({"DELIVERY_ALLOW": "qa"}, "addresses \\(name@example.com\\) and domains"),
])  # fmt: skip
def test_a_mode_that_cannot_work_stops_the_start(changed, said):
    with pytest.raises(ValueError, match=said):
        config.check({**config.DEFAULTS, **changed})


def test_smtp_is_the_default_and_an_allowlist_in_the_config_file_may_be_text():
    assert mode(config.DEFAULTS) == "smtp"
    given = {**config.DEFAULTS, "DELIVERY": "allowlist", "DELIVERY_ALLOW": "qa@example.com"}
    config.check(given)
    assert allowed(given) == frozenset({"qa@example.com"})


def test_a_recipient_is_on_the_list_by_its_address_or_its_whole_domain():
    allow = frozenset({"qa@example.com", "@team.example"})
    assert on_list("QA@example.com", allow) and on_list("anyone@team.example", allow)
    assert not on_list("other@example.com", allow)
    assert not on_list("x@sub.team.example", allow)  # a domain is itself, not its subdomains


def test_a_kept_mail_is_read_as_its_recipient_sees_it():
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = "a@example.com", "b@example.com", "Hi"
    mail.set_content("plain words")
    mail.add_alternative("<p>html words</p><script>alert(1)</script>", subtype="html")
    mail.add_attachment(b"\x00\x01data", maintype="application", subtype="octet-stream",
                        filename="data.bin")  # fmt: skip
    found = shown.read(mail.as_bytes())
    assert ("Subject", "Hi") in found.headers and found.problem is None
    assert found.text == "plain words\n"
    assert found.html is not None and "<script>" in found.html  # the page's frame keeps it inert
    assert found.attachments == [shown.Attachment(0, "data.bin", "application/octet-stream", 6)]
    assert shown.attachment(mail.as_bytes(), 0) == ("data.bin", "application/octet-stream",
                                                    b"\x00\x01data")  # fmt: skip
    assert shown.attachment(mail.as_bytes(), 1) is None
