"""A real DNS server for the tests: dnslib serving zone lines on a loopback port over UDP
and TCP, answering at most 512 octets over UDP as a classic server does."""

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from dnslib import DNSRecord
from dnslib.server import DNSHandler, DNSServer
from dnslib.zoneresolver import ZoneResolver

Serve = Callable[[list[str]], str]
PAIR_TRIES = 20  # port numbers drawn before giving up


class Classic(DNSHandler):
    """A server that answers at most 512 octets over UDP (RFC 1035): beyond, its question
    with no answer and TC set (dnslib's own truncation drops the question too)."""

    def get_reply(self, data: bytes) -> bytes:
        reply = super().get_reply(data)
        if self.protocol == "tcp" or len(reply) <= 512:
            return reply
        truncated = DNSRecord.parse(data).reply()
        truncated.header.tc = 1
        return truncated.pack()


class Heard:
    """dnslib's logger: says nothing, notes each request's protocol."""

    def __init__(self) -> None:
        self.protocols: list[str] = []

    def log_recv(self, handler: DNSHandler, data: bytes) -> None:
        self.protocols.append(handler.protocol)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return lambda *args, **kwargs: None


@pytest.fixture
def heard() -> Heard:
    return Heard()


def bound_pair(make: Callable[[int, bool], DNSServer]) -> tuple[DNSServer, DNSServer]:
    """A TCP and a UDP server bound on one port number the OS chose.

    The OS picks a port free for TCP; another process may hold the same number for UDP.
    Such a pair is closed and another drawn: a bounded search, not a wait.
    """
    for _ in range(PAIR_TRIES):
        tcp = make(0, True)
        try:
            return tcp, make(tcp.server.server_address[1], False)
        except OSError as exc:
            tcp.server.server_close()  # the UDP server closed its own socket when bind failed
            if exc.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no port free for both TCP and UDP in {PAIR_TRIES} tries")


@contextmanager
def serving(lines: list[str], heard: Heard | None = None) -> Iterator[str]:
    """Serve zone lines until the block ends; yields the server as DNS_RESOLVERS names it."""
    resolver = ZoneResolver("\n".join(lines) + "\n")
    found = {"address": "127.0.0.1", "logger": heard or Heard(), "handler": Classic}
    pair = bound_pair(lambda port, tcp: DNSServer(resolver, port=port, tcp=tcp, **found))  # type: ignore[arg-type]
    for server in pair:
        server.start_thread()
    try:
        yield f"127.0.0.1:{pair[0].server.server_address[1]}"
    finally:
        for server in pair:
            server.stop()
            server.server.server_close()


@pytest.fixture
def serve(app, heard: Heard) -> Iterator[Serve]:  # type: ignore[no-untyped-def]
    """Serve zone lines on a loopback port over UDP and TCP; OUTBOX_DNS_RESOLVERS names it."""
    running = []

    def start(lines: list[str]) -> str:
        server = serving(lines, heard)
        app.config["DNS_RESOLVERS"] = server.__enter__()
        running.append(server)
        return str(app.config["DNS_RESOLVERS"])

    yield start
    for server in running:
        server.__exit__(None, None, None)


def txt(name: str, text: str) -> str:
    """A zone file's TXT line, its text in strings of 255 octets as DNS takes them."""
    strings = " ".join(f'"{text[i : i + 255]}"' for i in range(0, len(text), 255))
    return f"{name} IN TXT ( {strings} )"
