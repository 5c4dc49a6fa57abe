"""outbox.client against the API served for real (gunicorn): fields, errors, reading, moves."""

import email.policy
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email import message_from_bytes

import pytest
import sqlalchemy as sa

from outbox.auth import tokens
from outbox.client import (
    Attachment,
    AuthError,
    Client,
    Conflict,
    Email,
    FieldErrors,
    Forbidden,
    NotFound,
    TooLarge,
    Unavailable,
)
from outbox.models import Message
from outbox.models.db import db
from outbox.worker import Worker
from outbox.worker.tally import Tally
from tests.support.client_served import serve
from tests.support.smtpd import free_port

# Bytes no text encoding leaves alone: every byte value, CR and LF among them.
BINARY = bytes(range(256)) * 4


@pytest.fixture
def client(served):  # type: ignore[no-untyped-def]  # noqa: F811
    with Client(served.url, tokens.create("client"), retries=2, backoff=0.05) as found:
        yield found


@pytest.mark.parametrize(("module", "setup"), [
    ("outbox.client", "import outbox.client"),
    ("outbox.client.django", "import django.conf; django.conf.settings.configure(); "
                             "import outbox.client.django"),
])  # fmt: skip
def test_the_client_imports_without_flask_sqlalchemy_or_a_database_driver(module, setup):
    heavy = ["flask", "sqlalchemy", "pymysql", "psycopg", "pydantic", "werkzeug", "django"]
    if module.endswith("django"):
        heavy.remove("django")
    code = f"import sys; {setup}; print([m for m in {heavy!r} if m in sys.modules])"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def _send_every_field(client, path, table, later):  # type: ignore[no-untyped-def]
    return client.send(
        sender=("Zoë Shop", "shop@example.com"),
        to=["jürgen@bücher.example", "Jo <jo@bücher.example>"],
        cc=("Ann <ann@example.com>", "bob@example.com"), bcc="hidden@example.com",
        reply_to="help@example.com", subject="Grüße ✓", text="plain ✓\n",
        html="<p>rich ✓</p>", headers={"X-Campaign": "spring"}, priority=7, send_after=later,
        attachments=[("data.bin", BINARY), path, table,
                     Attachment("notes.txt", "né\n".encode(), "text/plain; charset=utf-8")],
    )  # fmt: skip


def test_a_sent_message_keeps_every_field_to_the_smtp_server(smtp_app, smtp, client, tmp_path):
    path = tmp_path / "report.pdf"
    path.write_bytes(BINARY[::-1])
    (tmp_path / "table.csv").write_bytes(b"a,b\n")
    later = datetime.now(UTC) - timedelta(seconds=1)
    with (tmp_path / "table.csv").open("rb") as table:
        sent = _send_every_field(client, path, table, later)
    assert (sent.status, sent.priority, sent.subject) == ("queued", 7, "Grüße ✓")
    assert sent.sender == "Zoë Shop <shop@example.com>"
    assert sent.cc == ["Ann <ann@example.com>", "bob@example.com"]
    assert sent.send_after == later.replace(microsecond=0)
    detail = client.get(sent.id)
    assert [(a.filename, a.content_type, a.size) for a in detail.attachments] == [
        ("data.bin", "application/octet-stream", 1024), ("report.pdf", "application/pdf", 1024),
        ("table.csv", "text/csv", 4), ("notes.txt", "text/plain; charset=utf-8", 4)]  # fmt: skip
    assert Worker().drain() == Tally(sent=1)
    (mail,) = smtp.received
    idn = ["jürgen@xn--bcher-kva.example", "jo@xn--bcher-kva.example"]  # domains as A-labels
    assert sorted(mail.rcpt_tos) == sorted([*idn, "ann@example.com", "bob@example.com",
                                            "hidden@example.com"])  # fmt: skip
    parsed = message_from_bytes(mail.content, policy=email.policy.default)
    assert b"hidden@example.com" not in mail.content
    assert str(parsed["Subject"]) == "Grüße ✓" and parsed["X-Campaign"] == "spring"
    assert parsed["Reply-To"] == "help@example.com"
    assert parsed.get_body(("html",)).get_content().strip() == "<p>rich ✓</p>"
    assert parsed.get_body(("plain",)).get_content().strip() == "plain ✓"
    files = {part.get_filename(): part.get_content() for part in parsed.iter_attachments()}
    assert files["data.bin"] == BINARY and files["report.pdf"] == BINARY[::-1]
    assert files["notes.txt"] == "né\n" and files["table.csv"] == "a,b\n"


def test_a_named_mailbox_with_a_unicode_local_part_is_queued(client):
    sent = client.send(to="Jürgen <jürgen@bücher.example>", text="x")
    assert sent.to == ["Jürgen <jürgen@bücher.example>"]


def test_bad_fields_are_named_by_the_exception(client):
    with pytest.raises(FieldErrors) as caught:
        client.send(to="not an address", subject="a\nb", headers={"Subject": "x"})
    assert set(caught.value.fields) == {"to", "subject", "text", "headers"}
    assert caught.value.status == 422 and "to:" in str(caught.value)
    good = Email(to="a@example.com", text="x")
    with pytest.raises(FieldErrors) as caught:
        client.send_batch([good, Email(to="a@example.com", text="x", priority=10**9)])
    assert list(caught.value.fields) == ["messages[1].priority"]
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Message)) == 0


def test_tokens_the_api_refuses_raise_auth_errors(served, client):  # noqa: F811
    with Client(served.url, "obx_unknown") as stranger, pytest.raises(AuthError) as caught:
        stranger.send(to="a@example.com", text="x")
    assert caught.value.status == 401 and "token" in str(caught.value)
    reader = Client(served.url, tokens.create("reader", ["read"]))
    with reader, pytest.raises(Forbidden) as forbidden:
        reader.send(to="a@example.com", text="x")
    assert forbidden.value.scope == "send"


def test_a_key_reused_for_another_message_is_a_conflict(client):
    first = client.send(to="a@example.com", text="one", idempotency_key="order-1")
    assert client.send(to="a@example.com", text="one", idempotency_key="order-1").id == first.id
    with pytest.raises(Conflict) as caught:
        client.send(to="a@example.com", text="two", idempotency_key="order-1")
    assert caught.value.id == first.id


def test_listing_pages_and_moves(client):
    queued = client.send_batch([Email(to=f"r{n}@example.com", text="x") for n in range(5)])
    page = client.list(limit=2)
    assert [m.id for m in page.messages] == [q.id for q in queued][::-1][:2]
    assert page.before is not None
    assert [m.id for m in client.messages(limit=2)] == [q.id for q in queued][::-1]
    assert [m.to for m in client.messages(recipient="r3@example.com")] == [["r3@example.com"]]
    cancelled = client.cancel(queued[0].id)
    assert cancelled.status == "cancelled"
    with pytest.raises(Conflict) as caught:
        client.cancel(queued[0].id)
    assert caught.value.message_status == "cancelled"
    assert client.resend(queued[0].id).status == "queued"
    assert [m.id for m in client.messages(status="queued")] == [q.id for q in queued][::-1]
    with pytest.raises(NotFound):
        client.get(queued[-1].id + 1000)


def test_a_server_not_listening_is_unavailable_after_the_retries():
    client = Client(f"http://127.0.0.1:{free_port()}", "obx_x", retries=2, backoff=0.01)
    with pytest.raises(Unavailable, match="could not be reached") as caught:
        client.send(to="a@example.com", text="x")
    assert len(caught.value.idempotency_key or "") == 32  # made for it, to send again under


def test_a_kept_alive_connection_the_server_closed_while_idle_is_replaced(client):
    """gunicorn closes a connection idle for 2 s: a move (never retried after a lost
    answer) made after that must still go through, on a new connection."""
    sent = client.send(to="a@example.com", text="x")
    (idle,) = client.transport._idle
    time.sleep(2.5)
    assert client.cancel(sent.id).status == "cancelled"
    assert client.transport._idle and client.transport._idle[0] is not idle


def test_a_message_over_the_servers_limit_is_too_large(app, tmp_path):
    with serve(app.config["DATABASE_URL"], tmp_path, MAX_MESSAGE_BYTES="1000") as small:
        with Client(small.url, tokens.create("big")) as big, pytest.raises(TooLarge) as caught:
            big.send(to="a@example.com", text="x", attachments=[("a.bin", BINARY * 2)])
    assert (caught.value.status, caught.value.limit) == (413, 1000)
    assert "1000" in str(caught.value)
