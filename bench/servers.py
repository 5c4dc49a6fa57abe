"""The HTTP servers bench/enqueue.py runs an app under: gunicorn or granian, on a free port.

Both get the same number of processes and of threads that run the app: gunicorn's
`gthread` workers x `--threads`, or `sync` workers (one request at a time each);
granian's WSGI workers x `--blocking-threads` (1 for `sync`). granian parses HTTP in
Rust and hands each request to one of those threads.
"""

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SERVERS = ("gunicorn", "granian")
OUTBOX = "outbox:create_app()"
FLOOR = "floor_app:app"  # bench/floor_app.py: a Flask view that stores nothing
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Setting:
    """A server and how many processes and threads run the app."""

    server: str
    workers: int
    worker_class: str  # "gthread" or "sync"
    threads: int

    @property
    def app_threads(self) -> int:
        return self.threads if self.worker_class == "gthread" else 1

    def describe(self) -> str:
        if self.server == "granian":
            return f"granian: {self.workers} WSGI workers x {self.app_threads} threads"
        threads = f" x {self.threads} threads" if self.worker_class == "gthread" else ""
        return f"gunicorn: {self.workers} {self.worker_class} workers{threads}"

    def command(self, app: str, port: int) -> list[str]:
        """The command line serving app (module:object, or module:factory()) on port."""
        if self.server == "granian":
            factory = app.endswith("()")
            return [str(BIN / "granian"), "--interface", "wsgi", "--host", "127.0.0.1",
                    "--port", str(port), "--workers", str(self.workers),
                    "--blocking-threads", str(self.app_threads), "--backlog", "512",
                    "--no-ws", "--log-level", "warning",
                    *(["--factory"] if factory else []), app.removesuffix("()")]  # fmt: skip
        return [str(BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}",
                "--workers", str(self.workers), "--worker-class", self.worker_class,
                "--threads", str(self.threads), "--backlog", "512",
                "--log-level", "warning", app]  # fmt: skip


@dataclass
class Served:
    """A running server: its port and its processes (the master first)."""

    port: int
    pids: list[int]

    @property
    def workers(self) -> list[int]:
        return self.pids[1:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children(pid: int) -> list[int]:
    """A process's children, from every one of its threads."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/api/openapi.json")
        conn.getresponse().read()  # 401 without a token: it is up all the same
        conn.close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def served(setting: Setting, app: str, env: dict[str, str]) -> Iterator[Served]:
    """Start the server on a free port, wait until every worker is up; stop it after."""
    port = free_port()
    env = {**os.environ, **env}
    if app == FLOOR:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    # A process group of its own, ended whole: a worker must not outlive a master that
    # had to be killed.
    process = subprocess.Popen(setting.command(app, port), env=env, process_group=0)
    try:
        deadline = time.monotonic() + 30
        while not (_answers(port) and len(children(process.pid)) >= setting.workers):
            if time.monotonic() > deadline or process.poll() is not None:
                sys.exit(f"{setting.server} did not answer within 30 s")
            time.sleep(0.2)
        yield Served(port, [process.pid, *children(process.pid)])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
