"""HTTP to the API with the standard library: kept-alive connections, retries with backoff."""

import http.client
import json
import random
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from outbox.client.errors import OutboxError, Unavailable, from_answer

# Connection errors: the request may or may not have reached the server.
CONNECTION_ERRORS = (OSError, http.client.HTTPException)
# How a kept-alive connection the server closed while idle fails the next request.
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: Any  # the decoded JSON, or None


@dataclass(frozen=True)
class Retries:
    """How often and how long a request is tried again: retries after the first try, each
    waiting backoff * 2**n seconds (a Retry-After given counts too), at most max_backoff,
    less up to half at random so that clients that failed together do not retry together."""

    retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 8.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        wait = self.backoff * 2**attempt
        if retry_after and retry_after.isdigit():
            wait = max(wait, float(retry_after))
        wait = min(wait, self.max_backoff)
        return wait * (0.5 + random.random() / 2)


class Transport:
    """Requests to one API: a few idle connections kept per client, safe across threads."""

    def __init__(self, url: str, token: str, timeout: float, retries: Retries):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the outbox URL must be http(s)://host[:port][/path]; got {url!r}")
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.token, self.timeout, self.retries = token, timeout, retries
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self, reuse: bool) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection if reuse and there is one, else a new one; whether reused."""
        with self._lock:
            if self._idle and reuse:
                return self._idle.pop(), True
        if self.https:
            context = ssl.create_default_context()
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=context), False  # fmt: skip
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < 4:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; the transport opens new ones if used again."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def once(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> Answer:  # fmt: skip
        """One request, no retry: its answer, or a connection error raised."""
        sent = {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                "User-Agent": "outbox.client", **(headers or {})}  # fmt: skip
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        conn, response, raw = self._exchange(method, path, data, sent)
        found = {k.lower(): v for k, v in response.getheaders()}
        if response.will_close:
            conn.close()
        else:
            self._release(conn)
        return Answer(response.status, found, _decode(raw, found.get("content-type", "")))

    def _exchange(self, method: str, path: str, data: bytes | None, headers: dict[str, str],
                  reuse: bool = True) -> tuple[http.client.HTTPConnection,
                                               http.client.HTTPResponse, bytes]:  # fmt: skip
        conn, reused = self._connection(reuse)
        try:
            conn.request(method, self.prefix + path, body=data, headers=headers)
            response = conn.getresponse()
            return conn, response, response.read()
        except STALE:
            conn.close()
            if not reused:
                raise
            # A server closes a kept-alive connection it found idle (gunicorn after 2 s)
            # without reading what came next: try once more, on a new connection.
            return self._exchange(method, path, data, headers, reuse=False)
        except BaseException:
            conn.close()
            raise

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None, *,
                retry_lost: bool = True) -> Answer:  # fmt: skip
        """The request's successful answer, tried again on 503 and connection errors.

        retry_lost=False retries only what cannot have been done: a 503, or a connection
        refused. A request that carries an Idempotency-Key can always be retried: the
        server answers a repeat with the message the first one queued.
        """
        attempt = 0
        while True:
            try:
                answer = self.once(method, path, body, headers)
            except CONNECTION_ERRORS as exc:
                safe = retry_lost or isinstance(exc, ConnectionRefusedError)
                if not safe or attempt >= self.retries.retries:
                    raise Unavailable(f"{self._where(path)} could not be reached: {exc}") from exc
                time.sleep(self.retries.delay(attempt, None))
            else:
                if answer.status < 400:
                    return answer
                if answer.status != 503 or attempt >= self.retries.retries:
                    raise _refused(answer)
                time.sleep(self.retries.delay(attempt, answer.headers.get("retry-after")))
            attempt += 1

    def _where(self, path: str) -> str:
        scheme = "https" if self.https else "http"
        port = f":{self.port}" if self.port else ""
        return f"{scheme}://{self.host}{port}{self.prefix}{path}"


def _decode(raw: bytes, content_type: str) -> Any:
    if not raw or "json" not in content_type:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _refused(answer: Answer) -> OutboxError:
    body = answer.body if isinstance(answer.body, dict) else {}
    return from_answer(answer.status, body)
