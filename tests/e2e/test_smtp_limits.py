"""A flood of connections against the real `outbox smtpd` and `outbox bounces --listen`.

The flood comes from other loopback addresses (127.0.0.2 and up: all of 127/8 is this
host) than the client that must still be served (127.0.0.1), over real TCP.
"""

import os
import resource
import smtplib
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import func, select

from outbox.models import BounceMail, Message
from outbox.models.db import db
from tests.support import processes
from tests.support.smtpd import free_port
from tests.support.smtpd_process import Certs, connect, running

FLOOD = 1100  # idle connections: more than systemd's default of 1,024 open files
SYSTEMD_OPEN_FILES = 1024
BOUNCES = "bounces@example.com"


@pytest.fixture(autouse=True)
def open_files() -> Iterator[None]:
    """Room in this process for the flood's sockets and the servers' (they inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * FLOOD + 500
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def opened(stack: ExitStack, port: int, source: str) -> socket.socket:
    """A TCP connection to port from the loopback address source, closed with stack."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0))
    return stack.enter_context(sock)


def first_line(sock: socket.socket) -> bytes:
    """The server's first reply line on sock (b"" if it closed without one)."""
    got = b""
    while not got.endswith(b"\n"):
        chunk = sock.recv(1000)
        if not chunk:
            break
        got += chunk
    return got


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    got = b""
    while chunk := sock.recv(1000):
        got += chunk
    return got


def quit_all(socks: list[socket.socket]) -> None:
    """QUIT on each, and wait for the server to close it: it has counted each out by then."""
    for sock in socks:
        sock.sendall(b"QUIT\r\n")
        until_closed(sock)


def shop_mail() -> bytes:
    return (b"From: shop@example.com\r\nTo: ann@example.com\r\nSubject: Still served\r\n\r\n"
            b"Hello\r\n")  # fmt: skip


def test_a_flood_of_idle_connections_from_one_address_locks_no_one_else_out(
    app: Flask, database_url: str, tmp_path: Path, certs: Certs, token: str
) -> None:
    with ExitStack() as stack, running(database_url, tmp_path, certs,
                                       open_files=SYSTEMD_OPEN_FILES) as smtpd:  # fmt: skip
        flood = [opened(stack, smtpd.port, "127.0.0.2") for _ in range(FLOOD)]
        with connect(smtpd.port, certs, "shop", token) as client:
            refused = client.sendmail("shop@example.com", ["ann@example.com"], shop_mail())
        assert refused == {}
        firsts = [first_line(sock) for sock in flood]
    assert Counter(line[:4] for line in firsts) == {b"220 ": 50, b"421 ": FLOOD - 50}
    turned_away = b"421 4.7.0 Too many connections from your address: at most 50 at once"
    assert all(line.startswith((b"220 ", turned_away)) for line in firsts)
    db.session.commit()
    assert db.session.scalar(select(func.count()).select_from(Message)) == 1


def test_the_total_cap_turns_away_a_new_client_and_frees_a_place_when_one_leaves(
    app: Flask, database_url: str, tmp_path: Path, certs: Certs
) -> None:
    settings = {"SMTPD_MAX_CONNECTIONS": "6", "SMTPD_MAX_CLIENT_CONNECTIONS": "3"}
    with ExitStack() as stack, running(database_url, tmp_path, certs, **settings) as smtpd:
        held = [opened(stack, smtpd.port, f"127.0.0.{n}") for n in (2, 2, 2, 3, 3)]
        assert all(first_line(sock).startswith(b"220 ") for sock in held)
        fourth = opened(stack, smtpd.port, "127.0.0.2")
        assert until_closed(fourth).startswith(b"421 4.7.0 Too many connections from your")
        sixth = opened(stack, smtpd.port, "127.0.0.4")
        assert first_line(sixth).startswith(b"220 ")
        full = opened(stack, smtpd.port, "127.0.0.5")
        assert until_closed(full) == b"421 4.7.0 Too many connections: at most 6 at once; " \
            b"closing, try again later\r\n"  # fmt: skip
        held[0].sendall(b"QUIT\r\n")
        assert until_closed(held[0]).startswith(b"221")  # the server counted it out first
        again = opened(stack, smtpd.port, "127.0.0.5")
        assert first_line(again).startswith(b"220 ")


def test_a_client_after_starttls_holds_one_place_and_gives_it_back_once(
    app: Flask, database_url: str, tmp_path: Path, certs: Certs, token: str
) -> None:
    settings = {"SMTPD_MAX_CONNECTIONS": "2", "SMTPD_MAX_CLIENT_CONNECTIONS": "1"}
    with ExitStack() as stack, running(database_url, tmp_path, certs, **settings) as smtpd:
        for _ in range(3):  # a place not given back would leave none for the next round
            with connect(smtpd.port, certs, "shop", token) as client:
                second = opened(stack, smtpd.port, "127.0.0.1")
                assert until_closed(second).startswith(b"421 4.7.0 Too many connections from")
                other = opened(stack, smtpd.port, "127.0.0.2")
                assert first_line(other).startswith(b"220 ")
                assert client.noop()[0] == 250
            quit_all([other])


def test_a_client_silent_before_it_logs_in_is_closed_after_the_short_timeout(
    app: Flask, database_url: str, tmp_path: Path, certs: Certs, token: str
) -> None:
    with ExitStack() as stack, running(database_url, tmp_path, certs,
                                       SMTPD_PREAUTH_TIMEOUT="1") as smtpd:  # fmt: skip
        client = stack.enter_context(connect(smtpd.port, certs, "shop", token))
        idle = opened(stack, smtpd.port, "127.0.0.2")
        assert first_line(idle).startswith(b"220 ")
        idle.sendall(b"EHLO idle.example\r\n")
        # The full idle time is --timeout (300 s): a close well within 60 s is the short one.
        assert until_closed(idle).endswith(b"421 4.4.2 Idle too long: closing the connection\r\n")
        assert client.noop()[0] == 250  # logged in the same time ago: still served


@contextmanager
def bounce_listener(app: Flask, tmp_path: Path, **settings: str) -> Iterator[int]:
    """`outbox bounces --listen` on a free loopback port with these settings; its port."""
    port = free_port()
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_SECRET_KEY=str(app.secret_key),
               OUTBOX_BOUNCE_ADDRESS=BOUNCES)  # fmt: skip
    env.update({f"OUTBOX_{name}": value for name, value in settings.items()})
    command = [sys.executable, "-m", "outbox", "bounces", "--listen", f"127.0.0.1:{port}"]
    with processes.group(command, env=env, stdout=processes.subprocess.PIPE, text=True) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"taking bounces for {BOUNCES} on 127.0.0.1:{port}"), line
        yield port
        assert processes.end(server) == 0


def bounce_from(source: str, port: int, size: int) -> tuple[int, bytes]:
    """One mail of about size bytes to the bare bounce address from source: the reply."""
    head = f"Subject: not a bounce\r\nMessage-ID: <{uuid.uuid4()}@example.net>\r\n\r\n"
    raw = head.encode() + (b"x" * 998 + b"\r\n") * (size // 1000)
    client = smtplib.SMTP("127.0.0.1", port, timeout=60, source_address=(source, 0))
    try:
        client.sendmail("", [BOUNCES], raw)
        return 250, b""
    except smtplib.SMTPResponseException as exc:
        return exc.smtp_code, exc.smtp_error
    except smtplib.SMTPRecipientsRefused as exc:
        return exc.recipients[BOUNCES]
    except smtplib.SMTPServerDisconnected:
        return 0, b""
    finally:
        client.close()


def stored_bounces() -> int:
    db.session.commit()
    return db.session.scalar(select(func.count()).select_from(BounceMail)) or 0


def test_the_bounce_listener_refuses_connections_and_mail_past_its_limits(
    app: Flask, tmp_path: Path
) -> None:
    settings = {"BOUNCE_MAX_CONNECTIONS": "5", "BOUNCE_MAX_CLIENT_CONNECTIONS": "3",
                "BOUNCE_MAX_BYTES": "1000000", "BOUNCE_CLIENT_BYTES": "2000000",
                "BOUNCE_CLIENT_MAILS": "3"}  # fmt: skip
    with ExitStack() as stack, bounce_listener(app, tmp_path, **settings) as port:
        held = [opened(stack, port, f"127.0.0.{n}") for n in (2, 2, 2, 3, 4)]
        assert all(first_line(sock).startswith(b"220 ") for sock in held)
        assert until_closed(opened(stack, port, "127.0.0.2")).startswith(b"421 4.7.0 Too many")
        assert until_closed(opened(stack, port, "127.0.0.5")).startswith(b"421 4.7.0 Too many")
        quit_all(held)
        # 30 mails of 900 KB in a row: the budget of 2,000,000 bytes a minute takes two,
        # and what it earns back while they are sent (2,000,000 bytes in 60 s) at most.
        started = time.monotonic()
        replies = [bounce_from("127.0.0.6", port, 900_000) for _ in range(30)]
        earned = int((time.monotonic() - started) / 60 * 2_000_000 // 900_000)
        assert [code for code, _ in replies[:3]] == [250, 250, 421]
        assert b"4.7.0 Too much mail from your address" in replies[2][1]
        assert 2 <= stored_bounces() <= 2 + earned
        taken = stored_bounces()
        # Small mails: three a minute from one client; another client has its own budget.
        assert [bounce_from("127.0.0.7", port, 1000)[0] for _ in range(4)] == [250] * 3 + [421]
        assert bounce_from("127.0.0.8", port, 1000)[0] == 250
        assert stored_bounces() == taken + 4
