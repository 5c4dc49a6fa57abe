"""A small Flask-Mail app switched to outbox.client.flask.Outbox, against the served API."""

import email.policy
from email import message_from_bytes

import pytest
import sqlalchemy as sa
from flask import Flask, jsonify
from flask_mail import Message as MailMessage

from outbox.auth import tokens
from outbox.client import FieldErrors
from outbox.client.flask import Outbox
from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from outbox.worker.tally import Tally

PDF = b"%PDF-1.4\r\n" + bytes(range(256))


@pytest.fixture
def make_shop(served):  # type: ignore[no-untyped-def]  # noqa: F811
    """shop() on the served API; each shop's client closed at the end."""
    made: list[Flask] = []

    def make(testing: bool = False) -> tuple[Flask, Outbox]:
        app, mail = shop(served, testing)
        made.append(app)
        return app, mail

    yield make
    for app in made:
        app.extensions["mail"].client.close()


def shop(served, testing: bool = False) -> tuple[Flask, Outbox]:  # type: ignore[no-untyped-def]  # noqa: F811
    """The app a Flask-Mail user has, but for one line: Outbox(app) where Mail(app) was."""
    app = Flask("shop")
    app.config.update(TESTING=testing, OUTBOX_URL=served.url, OUTBOX_TOKEN=tokens.create("shop"),
                      MAIL_DEFAULT_SENDER=("Shop", "shop@example.com"))  # fmt: skip
    mail = Outbox()
    mail.init_app(app)

    @app.post("/order")
    def order():  # type: ignore[no-untyped-def]
        msg = MailMessage("Order 42", recipients=[("Zoë", "zoe@example.com")],
                          cc=["partner@example.com"], bcc=["audit@example.com"],
                          reply_to=("Help", "help@example.com"), body="Ships ✓",
                          html="<p>Ships ✓</p>", extra_headers={"X-Order": "42"})  # fmt: skip
        msg.attach("invoice.pdf", "application/pdf", PDF)
        msg.attach("note.txt", "text/plain", "merci ✓\n")
        queued = mail.send(msg)
        return jsonify(id=queued and queued.id, msg_id=msg.msgId)

    @app.post("/hello")
    def hello():  # type: ignore[no-untyped-def]
        queued = mail.send_message("Hello", sender="Team <team@example.com>",
                                   recipients=["a@example.com"], body="hi")  # fmt: skip
        return jsonify(id=queued and queued.id)

    @app.post("/bulk")
    def bulk():  # type: ignore[no-untyped-def]
        with mail.connect() as conn:  # Flask-Mail's bulk sending
            ids = [conn.send(MailMessage("News", recipients=[f"n{n}@example.com"], body="x")).id
                   for n in range(2)]  # fmt: skip
        return jsonify(ids=ids)

    return app, mail


def _count() -> int:
    db.session.commit()
    return db.session.scalar(sa.select(sa.func.count()).select_from(Message)) or 0


def test_a_flask_mail_message_is_queued_and_delivered_whole(make_shop, smtp_app, smtp):
    app, mail = make_shop()
    with app.app_context(), mail.record_messages() as recorded:
        answer = app.test_client().post("/order").get_json()
        assert app.test_client().post("/hello").status_code == 200
        assert len(set(app.test_client().post("/bulk").get_json()["ids"])) == 2
    assert [m.subject for m in recorded] == ["Order 42", "Hello", "News", "News"]
    stored = db.session.get(Message, answer["id"])
    assert answer["msg_id"] == stored.message_id  # msgId: the Message-ID it goes out with
    assert Worker().drain() == Tally(sent=4)
    mails = {}
    for mail_ in smtp.received:
        mails[mail_.rcpt_tos[0]] = (
            mail_,
            message_from_bytes(mail_.content, policy=email.policy.default),
        )
    received, parsed = mails["zoe@example.com"]
    assert sorted(received.rcpt_tos) == ["audit@example.com", "partner@example.com",
                                         "zoe@example.com"]  # fmt: skip
    assert b"audit@example.com" not in received.content
    assert (parsed["From"], parsed["To"]) == ("Shop <shop@example.com>", "Zoë <zoe@example.com>")
    assert (parsed["Reply-To"], parsed["X-Order"]) == ("Help <help@example.com>", "42")
    assert parsed["Message-ID"] == answer["msg_id"]
    assert parsed.get_body(("html",)).get_content().strip() == "<p>Ships ✓</p>"
    files = {part.get_filename(): part.get_content() for part in parsed.iter_attachments()}
    assert files == {"invoice.pdf": PDF, "note.txt": "merci ✓\n"}
    _, parsed = mails["a@example.com"]
    assert parsed["From"] == "Team <team@example.com>"


def test_under_testing_nothing_is_queued_and_each_message_is_recorded(make_shop, app):
    shop_app, mail = make_shop(testing=True)
    with shop_app.app_context(), mail.record_messages() as recorded:
        assert shop_app.test_client().post("/order").get_json()["id"] is None
    assert [m.subject for m in recorded] == ["Order 42"]
    assert _count() == 0


def test_a_message_the_api_refuses_raises_naming_its_fields(make_shop, app):
    shop_app, mail = make_shop()
    with shop_app.app_context(), pytest.raises(FieldErrors) as caught:
        mail.send_message("Hi", recipients=["not an address"], body="x")
    assert list(caught.value.fields) == ["to"]
