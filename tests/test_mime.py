"""The mail a row makes: mime.prepare() writes the very bytes Flask-Mail's rendering writes."""

import random
import string
from collections.abc import Iterator
from types import SimpleNamespace

import flask_mail
import pytest
from flask import Flask
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from outbox import create_app, mime

DATE = "Sun, 22 Nov 2026 17:27:38 +0100"

# Text a user might write: ASCII, accents, other scripts, an emoji, quotes, commas,
# angle brackets and every kind of line end the generator rewrites.
WORDS = st.text(
    alphabet=st.sampled_from(
        list(string.ascii_letters + string.digits + " .,;:!?'\"()<>@-_=/\\")
        + list("éüßøÆłŁ中文日本語😀\u00a0\t")
    ),
    max_size=40,
)
TEXT = st.lists(
    st.sampled_from([*string.printable, *"éü中😀", "\r\n", "\n.", "From ", "x" * 120]),
    max_size=200,
).map("".join)
NO_BREAK = st.text(max_size=200).filter(lambda v: not mime.LINE_BREAK.search(v))
LOCAL = st.from_regex(r"[a-z0-9][a-z0-9._+-]{0,15}", fullmatch=True).filter(
    lambda s: ".." not in s and not s.endswith(".")
)
DOMAIN = st.sampled_from(["example.com", "mail.example.org", "xn--bcher-kva.example"])
ADDRESS = st.builds(lambda local, domain: f"{local}@{domain}", LOCAL, DOMAIN)
NAME = st.one_of(st.just(""), WORDS)


def listed(kind: str, pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    """Recipients as the recipients column holds them."""
    return [{"kind": kind, "address": a, **({"name": n} if n else {})} for n, a in pairs]


RECIPIENTS = st.builds(
    lambda to, cc, bcc: listed("to", to) + listed("cc", cc) + listed("bcc", bcc),
    st.lists(st.tuples(NAME, ADDRESS), max_size=4),
    st.lists(st.tuples(NAME, ADDRESS), max_size=3),
    st.lists(st.tuples(st.just(""), ADDRESS), max_size=2),
)
ROWS = st.fixed_dictionaries(
    {
        "subject": st.one_of(st.none(), WORDS, NO_BREAK),
        "from_addr": ADDRESS,
        "from_name": NAME,
        "recipients": RECIPIENTS,
        "reply_to": st.one_of(st.none(), ADDRESS),
        "reply_to_name": NAME,
        "text_body": st.one_of(st.none(), TEXT),
        "html_body": st.one_of(st.none(), TEXT),
        "headers": st.dictionaries(
            st.from_regex(r"X-[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True),
            st.one_of(WORDS, NO_BREAK),
            max_size=3,
        ),
        "message_id": st.from_regex(r"<[0-9a-f.]{10,40}@[a-z.]{3,20}>", fullmatch=True),
    }
).filter(lambda f: f["recipients"])


@pytest.fixture(scope="module")
def plain_app() -> Iterator[Flask]:
    app = create_app({"DATABASE_URL": "sqlite://", "SECRET_KEY": "test"})
    with app.app_context():
        yield app


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> Iterator[random.Random]:
    """The same boundaries and Date for both renderings: seed the returned Random before each."""
    rng = random.Random()
    monkeypatch.setattr(mime, "boundary", lambda: f"=_{rng.getrandbits(128):032x}")
    monkeypatch.setattr(mime, "_date", lambda: DATE)
    monkeypatch.setattr(flask_mail, "formatdate", lambda *args, **kwargs: DATE)
    yield rng


def both(rng: random.Random, row: SimpleNamespace) -> tuple[mime.Prepared, mime.Prepared]:
    """The row written directly and by Flask-Mail, with the same boundaries."""
    rng.seed(1)
    direct = mime._direct(row)
    rng.seed(1)
    return direct, mime.build(row, []).prepare()


FIXTURES_OK = [HealthCheck.function_scoped_fixture]  # fixed() patches alike for every example


@settings(max_examples=400, deadline=None, suppress_health_check=FIXTURES_OK)
@given(fields=ROWS)
@example(  # a long subject and an alternative part: both folded
    fields={"subject": "Your order has shipped and will reach you within three working days, yes",
            "from_addr": "shop@example.com", "from_name": "Shop", "reply_to": None,
            "reply_to_name": "", "recipients": listed("to", [("", "a@example.com")]),
            "text_body": "Hi\n", "html_body": "<p>Hi</p>",
            "headers": {}, "message_id": "<1.2@example.com>"},
)  # fmt: skip
def test_direct_writing_is_flask_mails_rendering(plain_app, fixed, fields) -> None:  # type: ignore[no-untyped-def]
    row = SimpleNamespace(**fields)
    direct, flask = both(fixed, row)
    assert direct.data.texts == flask.data.texts
    assert direct.data.bodies == flask.data.bodies == []
    assert direct.sender == flask.sender
    assert direct.recipients == flask.recipients


def test_prepare_writes_a_common_mail_itself(plain_app, fixed, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    row = SimpleNamespace(
        subject="Grüße", from_addr="z@example.com", from_name="Zoë", reply_to=None,
        reply_to_name="", recipients=listed("to", [("", "a@example.com")]), text_body="Hi",
        html_body="<p>Hi</p>",
        headers={}, message_id="<1.2@example.com>",
    )  # fmt: skip
    monkeypatch.setattr(mime, "build", None)  # would raise if prepare() fell back
    mail = mime.prepare(row, [])
    assert mail.sender == "z@example.com"  # the envelope: the address alone
    text = b"".join(mail.data.pieces())
    assert text.startswith(b'Content-Type: multipart/mixed; boundary="=_')
    assert b"\r\nSubject: =?utf-8?" in text


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"recipients": []}, "no recipient address"),
        ({"from_addr": ""}, "no sender address"),
        ({"subject": "a\nBcc: x@example.com"}, "a header holds a line break"),
        ({"text_body": "lone \ud800 surrogate"}, "cannot build message: UnicodeEncodeError"),
    ],
)
def test_prepare_refuses_what_build_refuses(plain_app, change, error) -> None:  # type: ignore[no-untyped-def]
    row = SimpleNamespace(
        subject="Hi", from_addr="a@example.com", from_name="", reply_to=None, reply_to_name="",
        recipients=listed("to", [("", "b@example.com")]), text_body="Hi", html_body=None,
        headers={},
        message_id="<1.2@example.com>",
    )  # fmt: skip
    vars(row).update(change)
    with pytest.raises(mime.BuildError, match=error):
        mime.prepare(row, [])


ADDRESS_TEXT = st.text(
    alphabet=string.ascii_letters + "0123!#$%&'*+/=?^_`{|}~-.@<>\", ", max_size=40
)
