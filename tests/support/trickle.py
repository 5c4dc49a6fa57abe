"""A webhook receiver that answers one byte a second, in a process of its own.

Run as `python -m tests.trickle` it listens on a port the OS gives, prints "port N",
then "connected" as each request has come, and trickles the same endless answer to each
connection until the client goes. A process of its own, so that the tests' counts of
threads and sockets are outbox's alone.
"""

import os
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import processes

ROOT = Path(__file__).parents[2]
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"


@dataclass
class Trickler:
    """The receiver's process, its port, and the connections it has seen so far."""

    process: subprocess.Popen  # type: ignore[type-arg]
    port: int
    connections: int = 0

    @classmethod
    def start(cls) -> "Trickler":
        process = processes.start([sys.executable, "-m", __name__], cwd=ROOT,
                                  stdout=subprocess.PIPE)  # fmt: skip
        assert process.stdout is not None
        return cls(process, int(process.stdout.readline().split()[1]))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def wait_connected(self, count: int, timeout: float = 60) -> None:
        """Wait until count requests have come in all."""
        assert self.process.stdout is not None
        out, deadline = self.process.stdout.fileno(), time.monotonic() + timeout
        while self.connections < count:
            if not select.select([out], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise AssertionError(f"{self.connections} of {count} connections came")
            self.connections += os.read(out, 4096).count(b"connected")

    def stop(self) -> None:
        processes.kill_group(self.process)


def _trickle(conn: socket.socket) -> None:
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(65536)
            if not chunk:
                return
            request += chunk
        print("connected", flush=True)
        try:
            for n in range(len(ANSWER) + 100000):
                conn.sendall((ANSWER[n : n + 1]) or b"x")
                time.sleep(1)  # the misbehaviour under test: a byte a second
        except OSError:
            return  # the client went


def _serve() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    print("port", server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_trickle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    _serve()
