"""One webhook request: a POST to an address safety.resolve checked, and what came of it.

http.client, with the connection made to the checked address while the Host header,
TLS's SNI and the certificate's check name the URL's host. It never follows a
redirect (a 3xx is a failure): a redirect could point anywhere, the internal network
included. A Cutoff ends every socket operation of a run's requests by one moment, and
ends them all at once when the worker stops.
"""

import http.client
import io
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass

from outbox.capabilities.webhooks.safety import Target

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


class Cut(Exception):
    """The requests were ended before their time; the text says why."""


class Cutoff:
    """The end of a group of requests: a moment no socket operation may pass, and a way to
    end them all sooner (a worker stopping).

    A timeout on each read is not enough: a server sending a byte a second never lets
    one expire. Every wait on a socket is given what is left until `at` instead.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.why: str | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def left(self) -> float:
        """Seconds left; Cut once ended, TimeoutError once none are left."""
        if self.why is not None:
            raise Cut(self.why)
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete answer within {self.seconds:g}s")
        return left

    def bound(self, sock: socket.socket) -> None:
        """Give sock's next operation what is left of the time."""
        sock.settimeout(self.left())

    def hold(self, sock: socket.socket) -> None:
        """Let cut() end sock; refused if already cut."""
        with self._lock:
            if self.why is not None:
                raise Cut(self.why)
            self._open.add(sock)

    def drop(self, sock: socket.socket) -> None:
        """Forget sock, before it is closed (its number may then be reused)."""
        with self._lock:
            self._open.discard(sock)

    def cut(self, why: str) -> None:
        """End every request now: their sockets shut, so that a blocked read returns."""
        with self._lock:
            self.why = why
            for sock in self._open:
                try:  # the plain socket's shutdown, also under TLS: the TLS object stays
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass


class _Bounded(io.RawIOBase):
    """A socket's reads, each waiting at most what is left of the cutoff."""

    def __init__(self, sock: socket.socket, cutoff: Cutoff) -> None:
        self.sock, self.cutoff = sock, cutoff

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "memoryview | bytearray") -> int:  # type: ignore[override]
        self.cutoff.bound(self.sock)
        return self.sock.recv_into(buffer)


class _Reading:
    """What http.client.HTTPResponse asks of a socket (makefile), with bounded reads."""

    def __init__(self, sock: socket.socket, cutoff: Cutoff) -> None:
        self.sock, self.cutoff = sock, cutoff

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_Bounded(self.sock, self.cutoff))


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to one address, named for the URL's host in Host; its socket
    held by the cutoff from before it connects."""

    def __init__(self, target: Target, address: str, cutoff: Cutoff) -> None:
        super().__init__(target.host, target.port)
        self.address, self.cutoff = address, cutoff

    def connect(self) -> None:
        family = (
            socket.AF_INET6 if ipaddress.ip_address(self.address).version == 6 else socket.AF_INET
        )
        sock = self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.cutoff.hold(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cutoff.bound(sock)
        sock.connect((self.address, self.port))

    def close(self) -> None:
        if self.sock is not None:
            self.cutoff.drop(self.sock)
        super().close()


class _PinnedTLS(_Pinned):
    """As _Pinned, over TLS whose SNI and certificate check name the URL's host."""

    def __init__(self, target: Target, address: str, cutoff: Cutoff,
                 context: ssl.SSLContext) -> None:  # fmt: skip
        super().__init__(target, address, cutoff)
        self.context = context

    def connect(self) -> None:
        super().connect()
        plain = self.sock
        self.sock = self.context.wrap_socket(plain, server_hostname=self.host,
                                             do_handshake_on_connect=False)  # fmt: skip
        self.cutoff.drop(plain)  # its number now belongs to the TLS socket
        self.cutoff.hold(self.sock)
        self.cutoff.bound(self.sock)
        self.sock.do_handshake()  # one deadline for the whole handshake (CPython's _ssl)


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The system's trust store, and ca_file's CAs besides; host names checked."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context


def post(target: Target, body: bytes, headers: dict[str, str], cutoff: Cutoff,
         context: ssl.SSLContext) -> Answer:  # fmt: skip
    """POST body to the target's first address that takes a connection; never raises.

    Every socket operation, connecting to the last byte read, ends by the cutoff.
    """
    started = time.monotonic()
    sent = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
            "Connection": "close", **headers}  # fmt: skip
    error = "no address to connect to"
    for address in target.addresses:
        if target.scheme == "https":
            conn: _Pinned = _PinnedTLS(target, address, cutoff, context)
        else:
            conn = _Pinned(target, address, cutoff)
        try:
            try:
                conn.connect()
            except ssl.SSLCertVerificationError as exc:
                return _failed(started, f"TLS certificate of {target.host} refused: "
                                        f"{exc.verify_message}")  # fmt: skip
            except (OSError, ssl.SSLError, Cut) as exc:
                error = _why(exc, address, target.port, cutoff)
                if cutoff.why is not None or isinstance(exc, TimeoutError):
                    break  # no time left for another address
                continue  # the next address, if the name has another
            return _exchange(conn, target, body, sent, started, cutoff)
        finally:
            conn.close()
    return _failed(started, error)


def _exchange(conn: _Pinned, target: Target, body: bytes, headers: dict[str, str],
              started: float, cutoff: Cutoff) -> Answer:  # fmt: skip
    try:
        assert conn.sock is not None  # connected
        cutoff.bound(conn.sock)  # sendall: one limit for the whole body
        conn.request("POST", target.path, body=body, headers=headers)
        response = http.client.HTTPResponse(_Reading(conn.sock, cutoff), method="POST")  # type: ignore[arg-type]
        response.begin()
        text = response.read(RESPONSE_BYTES).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException, Cut) as exc:
        return _failed(started, _why(exc, target.host, target.port, cutoff))
    code, latency = response.status, _ms(started)
    if 300 <= code < 400:
        where = response.getheader("Location") or "nowhere"
        error: str | None = f"HTTP {code}: redirect to {where} not followed"
    elif not 200 <= code < 300:
        error = f"HTTP {code} {response.reason}".strip()
    else:
        error = None
    return Answer(code, latency, text or None, error)


def _why(exc: BaseException, host: str, port: int, cutoff: Cutoff) -> str:
    if cutoff.why is not None:  # a read ended by cut() fails in whatever way it happens to
        return f"cut off before {host}:{port} answered in full: {cutoff.why}"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no complete answer from {host}:{port} within {cutoff.seconds:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {host}:{port}"
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer from {host}:{port}: {exc!r}"
    return f"{host}:{port}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)


def _failed(started: float, error: str) -> Answer:
    return Answer(None, _ms(started), None, error)


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
