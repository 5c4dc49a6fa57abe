"""build_draft: each bad field named with its error text, each good message as its Draft."""

from datetime import datetime

import pytest

from outbox.core import drafts
from outbox.core.addresses import Mailbox
from outbox.core.drafts import DraftError, build_draft
from tests.support.api import VALID


def test_a_bad_default_sender_is_named_on_every_draft():
    for _ in range(2):  # the second answer comes from the cached check
        with pytest.raises(drafts.DraftError) as refused:
            build_draft({"to": "a@example.com", "text": "hi"}, "nobody at example.com")
        assert "default sender is unusable" in refused.value.errors["from"]
    draft = build_draft({"to": "a@example.com", "text": "hi"}, "Shop <shop@example.com>")
    assert draft.from_addr == Mailbox("shop@example.com", "Shop")


NUL = "must not contain NUL characters or lone surrogates"
A_LINE_BREAK = "must not contain a line break (CR, LF or another line separator)"
OK = {"to": "a@example.com", "text": "hi"}
# Every error text build_draft gives, keyed by the field as the client named it.
REFUSED = [
    ({}, {"to": "at least one recipient is required",
          "text": "a text or an html body is required"}),
    ({"to": None, "text": "hi"}, {"to": "at least one recipient is required"}),
    ({"to": 5, "text": "hi"}, {"to": "must be a string or a list of strings"}),
    ({"to": [1], "text": "hi"}, {"to": "must be a string or a list of strings"}),
    ({**OK, "cc": {"a": 1}}, {"cc": "must be a string or a list of strings"}),
    ({**OK, "bcc": "bob@"}, {"bcc": "'bob@' is not an email address: "
                                    "There must be something after the @-sign."}),
    ({**OK, "subjet": "Hi", "unknown": 1, "from_addr": "x@example.com", "Subject": "Hi"},
     {"subjet": "is not a field of a message; did you mean subject?",
      "unknown": "is not a field of a message",
      "from_addr": "is not a field of a message; did you mean from?",
      "Subject": "is not a field of a message; did you mean subject?"}),
    ({**OK, "from": ["a@example.com", "b@example.com"]},
     {"from": "takes one sender address, got 2"}),
    ({**OK, "reply_to": "a@example.com, b@example.com"},
     {"reply_to": "takes one reply-to address, got 2"}),
    ({**OK, "from": "N" * 990 + " <outbox@example.com>"},
     {"from": "must be at most 998 characters"}),
    ({**OK, "reply_to": "N" * 990 + " <outbox@example.com>"},
     {"reply_to": "must be at most 998 characters"}),
    ({**OK, "subject": 5}, {"subject": "must be a string"}),
    ({**OK, "subject": "a\n" * 600}, {"subject": A_LINE_BREAK}),
    ({**OK, "subject": "x" * 999}, {"subject": "must be at most 998 characters"}),
    ({**OK, "text": 5, "html": None}, {"text": "must be a string"}),
    ({**OK, "text": "", "html": ""}, {"text": "a text or an html body is required"}),
    ({"to": "a@example.com", "html": []}, {"html": "must be a string"}),
    ({**OK, "priority": True}, {"priority": "must be a whole number"}),
    ({**OK, "priority": [1]}, {"priority": "must be a whole number"}),
    ({**OK, "priority": "1e3"}, {"priority": "'1e3' is not a whole number"}),
    ({**OK, "priority": 2_000_000}, {"priority": "must be between -1000000 and 1000000"}),
    ({**OK, "send_after": 5}, {"send_after": "must be an ISO 8601 date and time"}),
    ({**OK, "send_after": "soon"}, {"send_after": "'soon' is not an ISO 8601 date and time"}),
    ({**OK, "send_after": "0001-01-01T00:00:00+01:00"},
     {"send_after": "'0001-01-01T00:00:00+01:00' is out of range in UTC"}),
    ({**OK, "headers": ["X: 1"]}, {"headers": "must be an object of header names to values"}),
    ({**OK, "headers": {"X-Tag": 1}}, {"headers": "the value of X-Tag must be a string"}),
    ({**OK, "headers": {"Bad Name": "1"}}, {"headers": "'Bad Name' is not a valid header name"}),
    ({**OK, "headers": {"FROM": "x@example.com"}},
     {"headers": "FROM is set by outbox from the message's own fields"}),
    ({**OK, "headers": {"X-Tag": "a\u2028b"}}, {"headers": f"the value of X-Tag {A_LINE_BREAK}"}),
    ({**OK, "attachments": "a.txt"},
     {"attachments": "must be a list of {filename, content_type, content} objects"}),
    ({**OK, "attachments": [5]}, {"attachments": "each attachment needs a filename"}),
    ({**OK, "attachments": [{"content": "aGk="}]},
     {"attachments": "each attachment needs a filename"}),
    ({**OK, "attachments": [{"filename": "a", "content_type": 5, "content": "aGk="}]},
     {"attachments": "a: content_type must be a string"}),
    ({**OK, "attachments": [{"filename": "a", "content": 5}]},
     {"attachments": "a: content must be a base64 string"}),
    ({**OK, "attachments": [{"filename": "a", "content": "%%"}]},
     {"attachments": "a: content is not valid base64"}),
    ({**OK, "attachments": [{"filename": "dir/", "content": ""}]},
     {"attachments": "every attachment needs a file name"}),
    ({**OK, "attachments": [{"filename": "n" * 256, "content": ""}]},
     {"attachments": f"file name {'n' * 40!r}... is longer than 255 characters"}),
    ({**OK, "attachments": [{"filename": "a", "content_type": "text", "content": ""}]},
     {"attachments": "'text' is not a content type"}),
    ({"to": "a\x00@example.com", "text": "hi\ud800", "headers": {"X\x00": "v"},
      "subject": ["\x00"]}, {"to": NUL, "subject": NUL, "text": NUL, "headers": NUL}),
    ({**OK, "from": "x\x00@example.com", "reply_to": "\ud800"},
     {"from": NUL, "reply_to": NUL}),
]  # fmt: skip


@pytest.mark.parametrize("fields, errors", REFUSED)
def test_every_bad_field_is_named_with_its_error(fields, errors):
    with pytest.raises(drafts.DraftError) as refused:
        build_draft(fields, "outbox@example.com")
    assert refused.value.errors == errors


def test_a_message_without_a_sender_needs_a_default_one():
    with pytest.raises(drafts.DraftError) as refused:
        build_draft({**OK, "from": ""}, None)
    assert refused.value.errors == {"from": "required: no default sender is configured"}


ACCEPTED = [
    ({"to": ["Ann <ann@example.com>", "  ", "b@example.com, c@example.com"], "cc": "",
      "bcc": [], "from": "", "subject": None, "text": "", "html": "<p>x</p>",
      "priority": " 7 ", "send_after": "2030-01-02T03:04:05+02:00", "headers": {},
      "attachments": None},
     {"to": ["Ann <ann@example.com>", "b@example.com", "c@example.com"], "text": None,
      "html": "<p>x</p>", "priority": 7, "send_after": datetime(2030, 1, 2, 1, 4, 5)}),
    ({**OK, "priority": 5.0, "send_after": " 2030-01-02T03:04:05 ", "headers": None,
      "reply_to": ["Help <help@Example.COM>"],
      "attachments": [{"filename": "C:\\dir\\a.pdf", "content": "aGk=",
                       "content_type": "Application/Octet-Stream; x=y"}]},
     {"priority": 5, "send_after": datetime(2030, 1, 2, 3, 4, 5),
      "reply_to": "Help <help@example.com>",
      "attachments": [drafts.Upload("a.pdf", "application/pdf", b"hi")]}),
    ({**OK, "priority": "+5", "from": None, "headers": {"X-A": ""}},
     {"priority": 5, "headers": {"X-A": ""}}),
    ({"to": "a@example.com", "html": "x", "priority": "", "send_after": "", "subject": ""},
     {"text": None, "html": "x"}),
]  # fmt: skip


@pytest.mark.parametrize("fields, changed", ACCEPTED)
def test_a_good_message_becomes_its_draft(fields, changed):
    draft = build_draft(fields, "Shop <shop@example.com>")
    plain = {"from_addr": "Shop <shop@example.com>", "to": ["a@example.com"], "cc": [],
             "bcc": [], "reply_to": None, "subject": "", "text": "hi", "html": None,
             "headers": {}, "priority": 0, "stream": "transactional", "send_after": None,
             "attachments": [],
             "metadata": {}}  # fmt: skip
    listed = [draft.from_addr, *draft.to, *draft.cc, *draft.bcc, *filter(None, [draft.reply_to])]
    assert all(isinstance(mailbox, Mailbox) for mailbox in listed)  # parsed into parts, once
    assert {name: shown(value) for name, value in vars(draft).items()} == {**plain, **changed}


def shown(value: object) -> object:
    """Addresses as a person writes them, for comparing a draft with text."""
    if isinstance(value, Mailbox):
        return str(value)
    if isinstance(value, list):
        return [shown(item) for item in value]
    return value


DEFAULT_SENDER = "outbox@example.com"  # the tests' MAIL_DEFAULT_SENDER (tests/support/app.py)

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
