"""The stream of a mail handed to `outbox smtpd`: named in X-Outbox-Stream, which is never
sent on; none is transactional; an unknown name is refused with a 5xx saying so."""

import smtplib

import pytest
from sqlalchemy import select

from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from tests.support.smtpd_process import connect

pytestmark = pytest.mark.all_databases


def mail(message_id: str, stream: str | None) -> bytes:
    named = f"X-Outbox-Stream: {stream}\r\n" if stream is not None else ""
    return (f"From: shop@example.com\r\nTo: ann@example.com\r\nSubject: hi\r\n"
            f"Message-ID: <{message_id}@example.com>\r\n{named}\r\nHello\r\n").encode()  # fmt: skip


def streams() -> dict[str, str]:
    rows = db.session.execute(select(Message.message_id, Message.stream)).all()
    db.session.commit()
    return {message_id: stream for message_id, stream in rows}


def test_the_header_names_the_stream_and_is_not_sent_on(smtp_app, smtp, port, certs, token):
    client = connect(port, certs, "shop", token)
    try:
        client.sendmail("shop@example.com", ["ann@example.com"], mail("news", "broadcast"))
        client.sendmail("shop@example.com", ["ann@example.com"], mail("reset", None))
    finally:
        client.quit()
    assert streams() == {"<news@example.com>": "broadcast", "<reset@example.com>": "transactional"}
    assert Worker().drain().sent == 2
    (sent,) = [r for r in smtp.received if r.message_id == "<news@example.com>"]
    assert b"x-outbox-stream" not in sent.content.lower()
    assert sent.content.endswith(b"\r\n\r\nHello\r\n")


def test_an_unknown_stream_is_refused_naming_it(port, certs, token):
    client = connect(port, certs, "shop", token)
    try:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail("shop@example.com", ["ann@example.com"], mail("x", "bulk"))
    finally:
        client.quit()
    code, text = refused.value.smtp_code, refused.value.smtp_error
    assert code == 550 and b"X-Outbox-Stream" in text and b"'bulk' is not a stream" in text
    assert streams() == {}
