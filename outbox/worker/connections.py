"""The sessions a worker process keeps open, SMTP or capture by OUTBOX_DELIVERY: up to each
route's limit, lent out."""

import contextlib
import threading
from collections.abc import Iterator

from outbox.capabilities.capture import transport
from outbox.capabilities.capture.transport import Session
from outbox.capabilities.routes import Route
from outbox.worker.sender import SmtpSession


class Pools:
    """Open SMTP sessions by route, each lent to one sending thread at a time.

    A session stays open from batch to batch (a new connection costs a round trip or
    four, and a TLS handshake); a thread that finds every session of its route lent
    out waits for one. close() ends them all, at the end of a pass.
    """

    def __init__(self) -> None:
        self.returned = threading.Condition()
        self.free: dict[str, list[Session]] = {}
        self.made: dict[str, int] = {}
        self.sessions: list[Session] = []

    @contextlib.contextmanager
    def session(self, route: Route) -> Iterator[Session]:
        """A session of route's, this thread's alone until the block ends."""
        with self.returned:
            while True:
                free = self.free.setdefault(route.name, [])
                if free:
                    session = free.pop()
                    break
                if self.made.get(route.name, 0) < route.max_connections:
                    self.made[route.name] = self.made.get(route.name, 0) + 1
                    # SMTP, or capture's (OUTBOX_DELIVERY): read from the app's config
                    session = transport.session(route, SmtpSession)
                    self.sessions.append(session)
                    break
                self.returned.wait()
        try:
            yield session
        finally:
            with self.returned:
                self.free[route.name].append(session)
                self.returned.notify()

    def close(self) -> None:
        """Say goodbye on every session (each thread has given its session back)."""
        with self.returned:
            sessions, self.sessions = self.sessions, []
            self.free.clear()
            self.made.clear()
        for session in sessions:
            session.close()

    def __enter__(self) -> "Pools":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
