"""One webhook request: a POST to an address safety.resolve checked, and what came of it.

http.client, with the connection made to the checked address while the Host header,
TLS's SNI and the certificate's check name the URL's host. It never follows a
redirect (a 3xx is a failure): a redirect could point anywhere, the internal network
included.
"""

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from .safety import Target

RESPONSE_BYTES = 2048  # of a receiver's answer read and kept (cut to RESPONSE_CHARS)
USER_AGENT = "outbox-webhooks"


@dataclass(frozen=True)
class Answer:
    """What one request came to: delivered (a 2xx), or the error that says why not."""

    code: int | None
    latency_ms: int
    body: str | None = None
    error: str | None = None

    @property
    def delivered(self) -> bool:
        return self.error is None and self.code is not None and 200 <= self.code < 300


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to one address, named for the URL's host in Host."""

    def __init__(self, target: Target, address: str, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTLS(_Pinned):
    """As _Pinned, over TLS whose SNI and certificate check name the URL's host."""

    def __init__(self, target: Target, address: str, timeout: float,
                 context: ssl.SSLContext) -> None:  # fmt: skip
        super().__init__(target, address, timeout)
        self.context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The system's trust store, and ca_file's CAs besides; host names checked."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context


def post(target: Target, body: bytes, headers: dict[str, str], timeout: float,
         context: ssl.SSLContext) -> Answer:  # fmt: skip
    """POST body to the target's first address that takes a connection; never raises.

    Each socket operation waits at most what is left of timeout; the caller cuts off a
    server that answers a byte at a time (deliver.py waits for no request past it).
    """
    started = time.monotonic()
    sent = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
            "Connection": "close", **headers}  # fmt: skip
    error = "no address to connect to"
    for address in target.addresses:
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            break
        if target.scheme == "https":
            conn: _Pinned = _PinnedTLS(target, address, left, context)
        else:
            conn = _Pinned(target, address, left)
        try:
            try:
                conn.connect()
            except ssl.SSLCertVerificationError as exc:
                return _failed(started, f"TLS certificate of {target.host} refused: "
                                        f"{exc.verify_message}")  # fmt: skip
            except (OSError, ssl.SSLError) as exc:
                error = _why(exc, address, target.port, timeout)
                continue  # the next address, if the name has another
            return _exchange(conn, target, body, sent, started, timeout)
        finally:
            conn.close()
    return _failed(started, error)


def _exchange(conn: _Pinned, target: Target, body: bytes, headers: dict[str, str],
              started: float, timeout: float) -> Answer:  # fmt: skip
    try:
        conn.request("POST", target.path, body=body, headers=headers)
        if conn.sock is not None:
            conn.sock.settimeout(max(timeout - (time.monotonic() - started), 0.001))
        response = conn.getresponse()
        text = response.read(RESPONSE_BYTES).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        return _failed(started, _why(exc, target.host, target.port, timeout))
    code, latency = response.status, _ms(started)
    if 300 <= code < 400:
        where = response.getheader("Location") or "nowhere"
        error: str | None = f"HTTP {code}: redirect to {where} not followed"
    elif not 200 <= code < 300:
        error = f"HTTP {code} {response.reason}".strip()
    else:
        error = None
    return Answer(code, latency, text or None, error)


def _why(exc: BaseException, host: str, port: int, timeout: float) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer from {host}:{port} within {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {host}:{port}"
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer from {host}:{port}: {exc!r}"
    return f"{host}:{port}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)


def _failed(started: float, error: str) -> Answer:
    return Answer(None, _ms(started), None, error)


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
