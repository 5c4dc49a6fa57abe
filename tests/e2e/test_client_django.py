"""A Django project (tests/django_project) sending through outbox.client.django, served for real."""

import email.policy
import json
import os
import subprocess
import sys
from email import message_from_bytes
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db
from outbox.queue.store import BATCH_KEY_SEPARATOR
from outbox.worker import Worker
from outbox.worker.tally import Tally
from tests.support.client_served import Served

PROJECT = Path(__file__).parents[1] / "django_project"
IMAGE = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # as shop/views.py attaches it
SERVERS = [pytest.param("mariadb", marks=pytest.mark.mariadb),
           pytest.param("postgres", marks=pytest.mark.postgres)]  # fmt: skip


def django(served: Served, code: str) -> object:  # noqa: F811
    """Run code in the shop's Django (manage.py shell) against served; what it printed, as JSON."""
    env = dict(os.environ, OUTBOX_URL=served.url, OUTBOX_TOKEN=tokens.create("django"))
    found = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=PROJECT,
                           env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout.strip().splitlines()[-1])


def post(*paths: str) -> str:
    """Code that posts to each path with Django's test client and prints the JSON answers."""
    return ("import json; from django.test import Client; c = Client(); "
            f"print(json.dumps([c.post(p).json() for p in {list(paths)!r}]))")  # fmt: skip


def _keys() -> list[tuple[str, str | None]]:
    db.session.commit()
    rows = db.session.execute(sa.select(Message.subject, Message.idempotency_key)
                              .order_by(Message.id))  # fmt: skip
    return [(subject, key) for subject, key in rows]


def _by_subject(received: list) -> dict[str, email.message.EmailMessage]:  # type: ignore[type-arg]
    found = {}
    for mail in received:
        parsed = message_from_bytes(mail.content, policy=email.policy.default)
        found[str(parsed["Subject"])] = (mail, parsed)
    return found  # type: ignore[return-value]


@pytest.mark.parametrize("db_kind", SERVERS, indirect=True)
def test_django_mail_is_queued_in_a_batch_and_delivered_whole(served, smtp_app, smtp):  # noqa: F811
    assert django(served, post("/welcome/", "/order/")) == [{"sent": 1}, {"sent": 2}]
    (welcome, welcome_key), (confirmation, key), (notice, notice_key) = _keys()
    assert (welcome, confirmation, notice) == ("Welcome", "Order 42", "Stock low")
    batch = key.rpartition(BATCH_KEY_SEPARATOR)[0]  # type: ignore[union-attr]
    assert (key, notice_key) == (f"{batch} 0", f"{batch} 1")  # one batch request
    assert Worker().drain() == Tally(sent=3)
    mails = _by_subject(smtp.received)
    mail, parsed = mails["Order 42"]  # type: ignore[misc]
    assert sorted(mail.rcpt_tos) == ["audit@example.com", "buyer@example.com",
                                     "partner@example.com"]  # fmt: skip
    assert b"audit@example.com" not in mail.content
    assert (parsed["From"], parsed["Cc"]) == ("Orders <orders@example.com>", "partner@example.com")
    assert (parsed["Reply-To"], parsed["X-Order"]) == ("help@example.com", "42")
    assert parsed["Message-ID"] != "<x@shop>"  # outbox's own, fixed when it was queued
    assert parsed.get_body(("plain",)).get_content().strip() == "Your order ships."
    assert parsed.get_body(("html",)).get_content().strip() == "<p>Your order <b>ships</b>.</p>"
    files = {part.get_filename(): part.get_content() for part in parsed.iter_attachments()}
    assert files == {"invoice.pdf": IMAGE[::-1], "note.txt": "merci ✓\n",
                     "terms.txt": "Terms of sale: all sales are final.\n"}  # fmt: skip
    # The MIMEImage with its Content-ID: an inline part beside the HTML (RFC 2387).
    (related,) = [p for p in parsed.walk() if p.get_content_type() == "multipart/related"]
    (logo,) = related.iter_attachments()
    assert (logo.get_filename(), logo["Content-ID"], logo.get_content_disposition(),
            logo.get_content()) == ("logo.png", "<logo>", "inline", IMAGE)  # fmt: skip
    _, parsed = mails["Stock low"]  # type: ignore[misc]
    assert parsed.get_body(("html",)).get_content().strip() == "<p>Only 2 left</p>"
    _, parsed = mails["Welcome"]  # type: ignore[misc]
    assert (parsed["From"], parsed["To"]) == ("Shop <shop@example.com>", "Zoë <zoe@example.com>")
    assert parsed.get_body(("html",)).get_content().strip() == "<p>Hello ✓</p>"


def test_a_refused_message_is_quiet_with_fail_silently_and_named_without(served, app):  # noqa: F811
    (answer,) = django(served, post("/broken/"))  # type: ignore[misc]
    assert answer["silent"] == 0
    assert list(answer["fields"]) == ["messages[0].to"]  # the first of its batch
    assert _keys() == []


def test_more_messages_than_a_batch_takes_go_in_several_batches(served, app):  # noqa: F811
    code = ("from django.core import mail; from outbox.client import BATCH_LIMIT; "
            "m = [mail.EmailMessage(f's{n}', 'x', to=['a@example.com']) "
            "for n in range(BATCH_LIMIT + 1)]; "
            "print(mail.get_connection().send_messages(m))")  # fmt: skip
    assert django(served, code) == 1001
    keys = _keys()
    assert len(keys) == 1001
    batches = {k.rpartition(BATCH_KEY_SEPARATOR)[0] for _, k in keys}  # type: ignore[union-attr]
    assert len(batches) == 2
