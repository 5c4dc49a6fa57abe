"""Each submitted mail is queued exactly once: through a database outage, and under load.

The `outbox smtpd` process reaches MariaDB or PostgreSQL through a TCP relay of the
test's own, which the test cuts during DATA: the client must get 421 with nothing
stored, and its retry once the relay is back must queue the mail once. Then 20
clients at once submit 2,000 mails, every one of which must be stored once.
"""

import signal
import smtplib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask
from sqlalchemy import func, select

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db
from tests.support.smtpd import free_port
from tests.support.smtpd_process import Certs, connect, running

pytestmark = pytest.mark.parametrize(
    "db_kind",
    [pytest.param("mariadb", marks=pytest.mark.mariadb),
     pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)  # fmt: skip


class Relay:
    """A TCP relay to a database server that can be cut (refusing, connections dropped)."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.flowing = threading.Event()  # cleared: bytes wait in the relay (a stalled server)
        self.flowing.set()
        self.thread: threading.Thread | None = None

    def up(self) -> None:
        self.stopped.clear()
        listener = socket.create_server(("127.0.0.1", self.port))
        listener.settimeout(0.05)
        self.thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self.thread.start()

    def cut(self) -> None:
        """Stop listening and drop every connection: the server is gone, as far as outbox sees."""
        self.stopped.set()
        assert self.thread is not None
        self.thread.join()
        with self.lock:
            for sock in self.sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self.sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while not self.stopped.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                upstream = socket.create_connection(("127.0.0.1", self.target))
                client.settimeout(None)
                with self.lock:
                    self.sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def relay(database_url: str) -> Iterator[Relay]:
    found = Relay(sa.engine.make_url(database_url).port or 0)
    found.up()
    yield found
    found.cut()


def mail(message_id: str) -> bytes:
    return (f"From: shop@example.com\r\nTo: ann@example.com\r\nSubject: order\r\n"
            f"Message-ID: {message_id}\r\n\r\nshipped\r\n").encode()  # fmt: skip


def stored(message_id: str) -> list[int]:
    found = db.session.scalars(select(Message.id).where(Message.message_id == message_id)).all()
    db.session.commit()
    return list(found)


def test_a_database_outage_during_data_is_421_and_the_retry_queues_the_mail_once(
    app: Flask, database_url: str, relay: Relay, tmp_path: Path, certs: Certs
):
    token = tokens.create("shop", scopes=("send",))
    unseen = tokens.create("other", scopes=("send",))  # not in smtpd's token cache
    url = sa.engine.make_url(database_url).set(port=relay.port)
    with running(url.render_as_string(hide_password=False), tmp_path, certs) as smtpd:
        port = smtpd.port
        client = connect(port, certs, "shop", token)
        client.mail("shop@example.com")
        client.rcpt("ann@example.com")
        assert client.docmd("DATA")[0] == 354
        client.send(mail("<outage@shop.example.com>"))
        relay.cut()  # the database goes away with the mail all but sent
        client.send(b".\r\n")
        code, text = client.getreply()
        assert (code, text) == (
            421,
            b"4.3.0 The database cannot be reached: nothing was queued; try again later",
        )
        with pytest.raises(smtplib.SMTPServerDisconnected):  # 421 closes the connection
            client.noop()
        assert stored("<outage@shop.example.com>") == []
        with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
            connect(port, certs, "other", unseen)  # a token that must be looked up
        assert refused.value.smtp_code == 454  # temporary: the client tries again later
        relay.up()
        client = connect(port, certs, "shop", token)  # the client's retry
        client.mail("shop@example.com")
        client.rcpt("ann@example.com")
        code, text = client.data(mail("<outage@shop.example.com>"))
        [pk] = stored("<outage@shop.example.com>")
        assert (code, text) == (250, f"2.0.0 queued as {pk}".encode())
        # A client that lost that 250 and sends the mail again gets the same answer.
        client.mail("shop@example.com")
        client.rcpt("ann@example.com")
        assert client.data(mail("<outage@shop.example.com>")) == (code, text)
        client.quit()
    assert stored("<outage@shop.example.com>") == [pk]


CLIENTS, EACH = 20, 100


@pytest.mark.slow
def test_twenty_clients_at_once_submit_2000_mails_each_queued_once(
    app: Flask, database_url: str, tmp_path: Path, certs: Certs
):
    token = tokens.create("load", scopes=("send",))
    answers: dict[str, int] = {}
    problems: list[str] = []
    lock = threading.Lock()

    def submit(port: int, n: int) -> None:
        try:
            client = connect(port, certs, "load", token)
            for i in range(EACH):
                if i and i % 25 == 0:  # a new connection now and then, as apps make
                    client.quit()
                    client = connect(port, certs, "load", token)
                message_id = f"<load-{n}-{i}@shop.example.com>"
                client.mail("shop@example.com")
                client.rcpt(f"c{n}-{i}@example.com")
                code, text = client.data(mail(message_id))
                assert code == 250, (code, text)
                with lock:
                    answers[message_id] = int(text.split()[-1])
            client.quit()
        except Exception as exc:  # reported below, with the others
            with lock:
                problems.append(f"client {n}: {exc!r}")

    with running(database_url, tmp_path, certs) as smtpd:
        threads = [threading.Thread(target=submit, args=(smtpd.port, n)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert problems == []
    assert len(answers) == CLIENTS * EACH
    rows = db.session.execute(
        select(Message.message_id, Message.id).where(Message.source == "smtp:load")
    ).all()
    db.session.commit()
    assert len(rows) == CLIENTS * EACH
    assert dict(rows) == answers  # each Message-ID once, under the id its 250 named
    assert db.session.scalar(select(func.count()).select_from(Message)) == CLIENTS * EACH


def test_a_stop_lets_the_mail_under_way_get_its_250_and_exits_0(
    app: Flask, database_url: str, relay: Relay, tmp_path: Path, certs: Certs
):
    token = tokens.create("shop", scopes=("send",))
    url = sa.engine.make_url(database_url).set(port=relay.port)
    with running(url.render_as_string(hide_password=False), tmp_path, certs) as smtpd:
        client = connect(smtpd.port, certs, "shop", token)
        client.mail("shop@example.com")
        client.rcpt("ann@example.com")
        relay.flowing.clear()  # the database is slow to answer: the mail is under way
        assert client.docmd("DATA")[0] == 354
        client.send(mail("<stop@shop.example.com>") + b".\r\n")
        time.sleep(0.5)
        smtpd.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert smtpd.process.poll() is None  # waiting for the mail's answer
        with pytest.raises(OSError):  # no longer listening
            socket.create_connection(("127.0.0.1", smtpd.port), timeout=2).close()
        relay.flowing.set()
        code, text = client.getreply()
        [pk] = stored("<stop@shop.example.com>")
        assert (code, text) == (250, f"2.0.0 queued as {pk}".encode())
        client.close()
        assert smtpd.process.wait(timeout=30) == 0
