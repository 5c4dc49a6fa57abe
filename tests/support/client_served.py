"""The API served for real for the client tests (gunicorn), and a TCP proxy the tests control."""

import contextlib
import http.client
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from . import processes
from .smtpd import free_port

BIN = Path(sys.executable).parent


@dataclass
class Served:
    """outbox under gunicorn on a loopback port; log is its output."""

    port: int
    log: Path
    process: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


@contextlib.contextmanager
def serve(database_url: str, tmp_path: Path, **settings: str) -> Iterator[Served]:
    """gunicorn (one process, four threads) serving outbox on database_url until the end."""
    found = Served(free_port(), tmp_path / "server.log")
    env = dict(os.environ, OUTBOX_DATABASE_URL=database_url, OUTBOX_INSTANCE_PATH=str(tmp_path),
               OUTBOX_SECRET_KEY="test", OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com",
               **{f"OUTBOX_{k}": v for k, v in settings.items()})  # fmt: skip
    command = [str(BIN / "gunicorn"), "--workers", "1", "--worker-class", "gthread",
               "--threads", "4", "--bind", f"127.0.0.1:{found.port}",
               "outbox:create_app()"]  # fmt: skip
    with found.log.open("w") as log, \
         processes.group(command, env=env, stdout=log, stderr=log) as process:  # fmt: skip
        found.process = process
        deadline = time.monotonic() + processes.START_TIMEOUT
        while not _answers(found.port):
            assert process.poll() is None, found.log.read_text()
            assert time.monotonic() < deadline, "gunicorn did not answer"
            time.sleep(0.1)
        yield found


@pytest.fixture
def served(app: Flask, tmp_path: Path) -> Iterator[Served]:
    """The app fixture's database served for real."""
    with serve(app.config["DATABASE_URL"], tmp_path) as found:
        yield found


@dataclass
class Proxy:
    """A TCP proxy on a loopback port to target, whose misbehaviour a test turns on.

    drop_answers: the next that many answers from the target are read whole and then,
    instead of being passed on, the client's connection is cut: the server did the
    work, the client never hears of it. refuse: connections are accepted and closed at
    once, and those open are cut (a database that went away).
    """

    target: int
    drop_answers: int = 0
    refuse: bool = False
    dropped: int = 0
    refused: int = 0
    port: int = 0
    _open: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()
        self.accepting = threading.Thread(target=self._accept, daemon=True)
        self.accepting.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self.done.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            if self.refuse:
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if answers and self._take_drop():
                    time.sleep(0.2)  # let the rest of the answer come, then cut
                    break
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _take_drop(self) -> bool:
        with self._lock:
            if self.drop_answers <= 0:
                return False
            self.drop_answers -= 1
            self.dropped += 1
            return True

    def cut(self) -> None:
        """Close every connection open through the proxy."""
        with self._lock:
            found, self._open = self._open, []
        for sock in found:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.done.set()
        self.accepting.join()
        self.listener.close()
        self.cut()
