"""Several network hosts on one machine: network namespaces behind a bridge, and a relay
that lets them reach a server listening on 127.0.0.1 only.

Each host is a network namespace joined to a bridge in the root namespace by a veth
pair, with an address of its own in a private subnet. Every namespace has the machine's
hostname, so outbox workers' ids differ only by pid and random part; servers on the
bridge address see each namespace's own address, which tells which host did what.
A command runs on a host through `ip netns exec NAME ...`, which execs it: the pid is the
command's own. Needs root (CAP_NET_ADMIN); `refused()` says why not where it is missing.
Used by tests/e2e/test_hosts.py and bench/latency.py (--cost-hosts).
"""

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

SUBNET = "10.231"  # 10.231.N.0/24, N chosen free per run; the bridge is .1, host i is .10+i


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def free_octet() -> int:
    """A third octet whose 10.231.N.0/24 no interface on this machine uses."""
    used = ip("-o", "-4", "addr", "show").stdout
    for step in range(250):
        octet = (os.getpid() + step) % 250 + 1
        if f" {SUBNET}.{octet}." not in used:
            return octet
    raise AssertionError(f"no free /24 in {SUBNET}.0.0/16")


def _tag() -> str:
    return f"obx{os.getpid() % 100000}"  # interface names stay within 15 characters


def refused() -> str | None:
    """Why namespaces cannot be made here, or None where they can."""
    tag = _tag()
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = ip("netns", "add", f"{tag}-probe", check=False)
    if probe.returncode != 0:
        return f"ip netns add is not permitted here: {probe.stderr.strip()}"
    ip("netns", "delete", f"{tag}-probe", check=False)
    return None


@dataclass
class Network:
    """A bridge in the root namespace and one namespace per host behind it."""

    tag: str
    octet: int
    hosts: dict[str, str] = field(default_factory=dict)  # namespace name -> its address
    links: list[str] = field(default_factory=list)  # root-side interfaces to delete

    @property
    def gateway(self) -> str:
        return f"{SUBNET}.{self.octet}.1"

    def build(self, count: int) -> None:
        bridge = f"{self.tag}br"
        self.links.append(bridge)
        ip("link", "add", bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        for i in range(count):
            name, outer, inner = f"{self.tag}-h{i}", f"{self.tag}v{i}", f"{self.tag}p{i}"
            address = f"{SUBNET}.{self.octet}.{10 + i}"
            ip("netns", "add", name)
            self.hosts[name] = address
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self.links.append(outer)
            ip("link", "set", inner, "netns", name)
            ip("link", "set", outer, "master", bridge)
            ip("link", "set", outer, "up")
            ip("-n", name, "addr", "add", f"{address}/24", "dev", inner)
            ip("-n", name, "link", "set", inner, "up")
            ip("-n", name, "link", "set", "lo", "up")

    def tear_down(self) -> None:
        for name in self.hosts:
            ip("netns", "delete", name, check=False)
        for link in reversed(self.links):
            ip("link", "delete", link, check=False)

    def command(self, name: str, *argv: str) -> list[str]:
        """argv run on host name."""
        return ["ip", "netns", "exec", name, *argv]


@contextlib.contextmanager
def network(count: int) -> Iterator[Network]:
    """count hosts on a bridge, taken down at the end (ask refused() first)."""
    net = Network(_tag(), free_octet())
    try:
        net.build(count)
        yield net
    finally:
        net.tear_down()


class Relay:
    """A TCP forwarder: every connection to (host, port) is relayed to target.

    It counts connections by source address, so the caller can tell which host spoke.
    """

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server((host, 0))
        self.listener.settimeout(0.1)
        self.port: int = self.listener.getsockname()[1]
        self.peers: Counter[str] = Counter()
        self.sockets: list[socket.socket] = []
        self.pumps: list[threading.Thread] = []
        self.done = threading.Event()
        self.acceptor = threading.Thread(target=self._accept)

    def __enter__(self) -> "Relay":
        self.acceptor.start()
        return self

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                conn, peer = self.listener.accept()
            except TimeoutError:
                continue
            conn.setblocking(True)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            self.peers[peer[0]] += 1
            self.sockets += [conn, upstream]
            for pair in ((conn, upstream), (upstream, conn)):
                pump = threading.Thread(target=self._pump, args=pair)
                self.pumps.append(pump)
                pump.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.acceptor.join()
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for pump in self.pumps:
            pump.join()
        for sock in self.sockets:
            sock.close()
