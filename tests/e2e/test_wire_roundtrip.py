"""Generated mails enqueued as the API stores them, sent by a real worker process to real
SMTP servers offering 8BITMIME and SMTPUTF8 or not, and read back byte for byte.

SERVERS names each server kind and what it offers; a kind is a context manager factory
yielding a WireServer. tests/support/postfix.py's smtp-sink and smtpd can be added to it.
"""

import base64
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from outbox import queue
from outbox.core import addresses
from outbox.core.drafts import DraftError, build_draft
from outbox.mail.rendered import Features
from outbox.models import Message
from outbox.models.db import db
from tests.support.mailcheck import check, headers, wire
from tests.support.postfix import require
from tests.support.smtp_sink import SINK_FIELDS, SMTP_SINK, SmtpSink, split_trace
from tests.support.wire import Got, WireServer, aiosmtpd_server


@contextlib.contextmanager
def sink_server(eight_bit: bool) -> Iterator[WireServer]:
    """Postfix's smtp-sink (never SMTPUTF8), each mail read back from its dump file."""
    require(SMTP_SINK)
    sink = SmtpSink(eight_bit)

    def received() -> list[Got]:
        mails = sink.delivered()
        return [Got(m.mail_from, m.rcpt_tos, _mail_options(m.raw), m.content) for m in mails]

    try:
        yield WireServer(sink.port, Features(eight_bit=eight_bit), received)
    finally:
        sink.stop()


def _mail_options(raw: bytes) -> list[str]:
    """The parameters of MAIL FROM, from the trace field smtp-sink writes."""
    fields, _ = split_trace(raw, SINK_FIELDS)
    return fields[b"x-mail-args"][0].decode().partition(">")[2].split()


SERVERS: dict[str, Callable[[], contextlib.AbstractContextManager[WireServer]]] = {
    "aiosmtpd": lambda: aiosmtpd_server(Features()),
    "aiosmtpd 8BITMIME": lambda: aiosmtpd_server(Features(eight_bit=True)),
    "aiosmtpd 8BITMIME SMTPUTF8": lambda: aiosmtpd_server(Features(True, True)),
    "smtp-sink": lambda: sink_server(eight_bit=False),
    "smtp-sink 8BITMIME": lambda: sink_server(eight_bit=True),
}


@pytest.fixture(params=list(SERVERS))
def wire_server(request: pytest.FixtureRequest) -> Iterator[WireServer]:
    with SERVERS[request.param]() as server:
        yield server


TEXT_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
ONE_LINE = st.text(TEXT_CHARS, max_size=100).filter(lambda v: not addresses.LINE_BREAK.search(v))
BODY = st.lists(
    st.one_of(
        st.text(TEXT_CHARS, max_size=20),
        st.sampled_from(["\r\n", "\n", "\r", "\n.", ".\r\n", "\n..\n", "From ", " \n"]),
        st.sampled_from(["x" * 1200, "中" * 1500, "<p>" * 400, "é" * 600]),
    ),
    max_size=12,
).map("".join)
LOCAL = st.sampled_from(["ann", "b.c+d", "jörg", "o'neil"])
DOMAIN = st.sampled_from(["example.com", "faß.example", "ελλάς.example", "bücher.example"])
ADDRESS = st.builds("{}@{}".format, LOCAL, DOMAIN)
NAME = st.one_of(
    st.just(""), st.sampled_from(["Ann", "Doe, Jane", "Zoë Ärger", "=?utf-8?q?x?="]),
    st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs")), max_size=30),
)  # fmt: skip


def as_text(address: str, name: str) -> str:
    """A mailbox as a client writes it for the API: the name quoted."""
    if not name:
        return address
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + f'" <{address}>'


MAILBOX = st.builds(as_text, ADDRESS, NAME)
FILENAME = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"),
    min_size=1,
    max_size=120,
).filter(lambda v: v.strip() == v and not addresses.LINE_BREAK.search(v))
ATTACHMENT = st.fixed_dictionaries(
    {
        "filename": FILENAME,
        "content_type": st.sampled_from(["application/pdf", "text/plain", "image/png"]),
        "content": st.binary(max_size=2000).map(lambda b: base64.b64encode(b).decode()),
    },
    # An inline part of the HTML (or, with no HTML, an attachment with its Content-ID).
    optional={"content_id": st.sampled_from(["<logo@example.com>", "chart", "part.2"])},
)
MESSAGE = st.fixed_dictionaries(
    {
        "from": st.builds(lambda d, n: as_text(f"shop@{d}", n), DOMAIN, NAME),
        "to": st.lists(MAILBOX, min_size=1, max_size=3),
        "cc": st.lists(MAILBOX, max_size=2),
        "bcc": st.lists(ADDRESS, max_size=1),
        "subject": st.one_of(ONE_LINE, st.just("=?utf-8?q?literal?= " + "x" * 978)),
        "text": st.one_of(st.none(), BODY),
        "html": st.one_of(st.none(), BODY),
        "headers": st.dictionaries(st.sampled_from(["X-Tag", "X-Campaign"]), ONE_LINE, max_size=2),
        "attachments": st.lists(
            ATTACHMENT, max_size=2, unique_by=lambda a: a.get("content_id") or object()
        ),
    }
).filter(lambda m: m["text"] or m["html"])


def worker_env(app, port: int, tmp_path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")])),
        OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
        OUTBOX_INSTANCE_PATH=str(tmp_path),
        OUTBOX_MAIL_PORT=str(port),
        OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com",
        OUTBOX_SMTP_TIMEOUT="10",
    )
    return env


def sendable(address: str, offers: Features) -> bool:
    local = address.rpartition("@")[0]
    return local.isascii() or offers.smtputf8


def expected_envelope(row: Message, offers: Features) -> list[str]:
    found: dict[tuple[str, str], str] = {}
    for entry in row.recipients:
        if sendable(entry["address"], offers):
            local, _, domain = wire(entry["address"]).rpartition("@")
            found.setdefault((local, domain.lower()), f"{local}@{domain}")
    return list(found.values())


FIXTURES_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
               HealthCheck.data_too_large, HealthCheck.filter_too_much]  # fmt: skip


# No shrinking: each example is a worker process run, and a failing batch is read whole.
@settings(max_examples=2, deadline=None, suppress_health_check=FIXTURES_OK,
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # fmt: skip
@given(messages=st.lists(MESSAGE, min_size=20, max_size=20))
def test_mail_sent_by_a_worker_reads_back_as_stored(app, wire_server, tmp_path, messages):  # type: ignore[no-untyped-def]
    offers = wire_server.offers
    rows = {}
    for fields in messages:
        try:
            draft = build_draft(fields, None)
        except DraftError:
            continue  # what the API refuses is not sent
        message, _ = queue.enqueue(draft, source="test", max_attempts=1)
        rows[message.message_id] = message.id
    assert len(rows) >= 15  # the strategy makes what the API takes
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "send-queued"],
        env=worker_env(app, wire_server.port, tmp_path),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = {headers(g.content)["Message-ID"]: g for g in wire_server.received()}
    db.session.expire_all()
    for message_id, pk in rows.items():
        row = db.session.execute(select(Message).where(Message.id == pk)).scalar_one()
        envelope = expected_envelope(row, offers)
        if not envelope:
            assert message_id not in got and row.status == "failed"
            continue
        assert row.status == "sent", row.last_error
        mail = got[message_id]
        assert mail.rcpt_tos == envelope
        attached = queue.read_attachments(row.id)
        check(mail.content, row, attached, offers.smtputf8)
        body = mail.content.split(b"\r\n\r\n", 1)[1]
        if not body.isascii():
            assert offers.eight_bit and "BODY=8BITMIME" in mail.options
        utf8 = not mail.content.split(b"\r\n\r\n", 1)[0].isascii()
        envelope_utf8 = not all(a.isascii() for a in [mail.mail_from, *mail.rcpt_tos])
        assert ("SMTPUTF8" in mail.options) == (utf8 or envelope_utf8)
    db.session.commit()
