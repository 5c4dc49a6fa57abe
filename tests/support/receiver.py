"""A real webhook receiver for the tests: an HTTP server in a thread that verifies each
request with the standardwebhooks library, as the docs' receiver does, and dedupes
on webhook-id. It can be told to answer errors, redirect, hang, or be down."""

import json
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

from .smtpd import free_port


@dataclass
class Request:
    """One request as it came: path, headers (lower-case names), body."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Set secret before events come; answers, redirect or hang to misbehave."""

    secret: str | None = None
    port: int = field(default_factory=free_port)
    answers: deque[int] = field(default_factory=deque)  # statuses to answer in turn, then 204
    redirect_to: str | None = None  # answer 302 with this Location
    hang: float = 0.0  # seconds to wait before answering
    tls: ssl.SSLContext | None = None
    requests: list[Request] = field(default_factory=list)  # every request, as it came
    events: dict[str, Any] = field(default_factory=dict)  # verified, by webhook-id
    duplicates: int = 0  # verified requests whose webhook-id had come already
    refused: list[str] = field(default_factory=list)  # why requests failed verification
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/hooks"

    def start(self) -> "Receiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                receiver.handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # workers send 8 at a time each; 5 would reset some

        server = Server(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening: requests are refused until start() again on the same port."""
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length", 0)))
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self.lock:
            self.requests.append(Request(request.path, headers, body))
            status = self.answers.popleft() if self.answers else 204
        if self.hang:
            time.sleep(self.hang)
        if self.redirect_to:
            request.send_response(302)
            request.send_header("Location", self.redirect_to)
        elif status >= 300:
            request.send_response(status)
        else:
            status = self.verify(body, headers)
            request.send_response(status)
        request.send_header("Content-Length", "2")
        request.end_headers()
        request.wfile.write(b"ok")

    def verify(self, body: bytes, headers: dict[str, str]) -> int:
        """As a real receiver: verify with the library, dedupe on webhook-id."""
        try:
            event = Webhook(self.secret or "").verify(body, headers)
        except (WebhookVerificationError, ValueError, Exception) as exc:
            with self.lock:
                self.refused.append(str(exc))
            return 400
        with self.lock:
            if headers["webhook-id"] in self.events:
                self.duplicates += 1
            else:
                self.events[headers["webhook-id"]] = event
        return 204

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events.values() if e["type"] == kind]

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.02)


def loads(body: bytes) -> Any:
    return json.loads(body)
