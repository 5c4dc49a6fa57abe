"""Streams as declared (core.streams) and as the schema, the drafts and the clients take them."""

import pytest
from flask_mail import Message as MailMessage

from outbox.client import Email
from outbox.client.flask import to_email
from outbox.core.drafts import DraftError, build_draft
from outbox.core.streams import CLAIM_ORDER, DEFAULT, Stream, parse

VALID = {"to": "a@example.com", "text": "x"}


def test_transactional_is_the_default_and_is_claimed_first():
    assert DEFAULT is Stream.TRANSACTIONAL
    assert CLAIM_ORDER == (Stream.TRANSACTIONAL, Stream.BROADCAST)
    assert set(CLAIM_ORDER) == set(Stream)


@pytest.mark.parametrize("given", ["broadcast", "BROADCAST", " broadcast ", Stream.BROADCAST])
def test_a_stream_is_read_in_any_case(given):
    assert parse(given) is Stream.BROADCAST


@pytest.mark.parametrize("given", ["bulk", "", None, 1, ["broadcast"]])
def test_anything_else_is_refused_naming_the_streams(given):
    with pytest.raises(ValueError, match="transactional, broadcast"):
        parse(given)


def test_a_draft_takes_the_stream_and_defaults_it():
    assert build_draft(VALID, "s@example.com").stream is Stream.TRANSACTIONAL
    assert build_draft({**VALID, "stream": None}, "s@example.com").stream is Stream.TRANSACTIONAL
    assert build_draft({**VALID, "stream": "broadcast"}, "s@example.com").stream is Stream.BROADCAST
    with pytest.raises(DraftError) as caught:
        build_draft({**VALID, "stream": "news"}, "s@example.com")
    assert caught.value.errors == {
        "stream": "'news' is not a stream; the streams are transactional, broadcast"
    }


def test_the_default_stream_leaves_a_drafts_fingerprint_as_it_was():
    plain = build_draft(VALID, "s@example.com")
    named = build_draft({**VALID, "stream": "transactional"}, "s@example.com")
    news = build_draft({**VALID, "stream": "broadcast"}, "s@example.com")
    assert plain.fingerprint() == named.fingerprint() != news.fingerprint()


def test_the_client_sends_a_stream_only_when_given():
    assert "stream" not in Email(to="a@example.com", text="x").to_json()
    assert (
        Email(to="a@example.com", text="x", stream="broadcast").to_json()["stream"] == "broadcast"
    )


def test_flask_mail_names_the_stream_by_attribute_or_header():
    def mail(**extra: object) -> MailMessage:
        return MailMessage("Hi", sender="s@example.com", recipients=["a@example.com"], body="x",
                           **extra)  # type: ignore[arg-type]  # fmt: skip

    by_header = to_email(mail(extra_headers={"X-Outbox-Stream": "broadcast", "X-A": "1"}))
    assert by_header.to_json()["stream"] == "broadcast"
    assert by_header.to_json()["headers"] == {"X-A": "1"}  # the header is not sent on
    by_attribute = mail()
    by_attribute.stream = "broadcast"  # type: ignore[attr-defined]
    assert to_email(by_attribute).to_json()["stream"] == "broadcast"
    assert "stream" not in to_email(mail()).to_json()
