"""Workers on several network hosts (network namespaces) share one database and one SMTP server.

Each host is a network namespace joined to a bridge in the root namespace by a veth
pair, with an address of its own in a private subnet. The shared MariaDB listens on
127.0.0.1 only, so a relay on the bridge address forwards to it; the SMTP server
listens on the bridge address. Every namespace has the machine's hostname, so the
workers' ids differ only by pid and random part; the relay and the SMTP server see
each namespace's own address, which tells which host did what.

Short run: 600 messages, 3 hosts with one worker each. OUTBOX_SOAK=1: 20,000
messages, 3 hosts with two workers each. And immediate pickup across hosts: idle
workers with a tick far off send each message stored on this host, once.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox import queue
from outbox.core.recipients import decode
from outbox.core.status import Status
from outbox.models import Attempt, Message, WorkerBeat, utcnow
from outbox.models.db import db
from tests.support.app import draft
from tests.support.processes import START_TIMEOUT, end, start
from tests.support.rows import statuses
from tests.support.smtpd import Recorder, RecordingController
from tests.support.workers import wait_until, worker_env

SOAK = os.environ.get("OUTBOX_SOAK") == "1"
MESSAGES, HOSTS, WORKERS_PER_HOST, WAVES = (20_000, 3, 2, 40) if SOAK else (600, 3, 1, 6)
SUBNET = "10.231"  # 10.231.N.0/24, N chosen free per run; the bridge is .1, host i is .10+i

pytestmark = [
    pytest.mark.soak,
    pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)]),
]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _unavailable(reason: str) -> None:
    """Skip, or fail under CI, where the machine is known to allow namespaces."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _free_octet() -> int:
    """A third octet whose 10.231.N.0/24 no interface on this machine uses."""
    used = _ip("-o", "-4", "addr", "show").stdout
    for step in range(250):
        octet = (os.getpid() + step) % 250 + 1
        if f" {SUBNET}.{octet}." not in used:
            return octet
    raise AssertionError(f"no free /24 in {SUBNET}.0.0/16")


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
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(count):
            name, outer, inner = f"{self.tag}-h{i}", f"{self.tag}v{i}", f"{self.tag}p{i}"
            address = f"{SUBNET}.{self.octet}.{10 + i}"
            _ip("netns", "add", name)
            self.hosts[name] = address
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self.links.append(outer)
            _ip("link", "set", inner, "netns", name)
            _ip("link", "set", outer, "master", bridge)
            _ip("link", "set", outer, "up")
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")

    def tear_down(self) -> None:
        for name in self.hosts:
            _ip("netns", "delete", name, check=False)
        for link in reversed(self.links):
            _ip("link", "delete", link, check=False)


@pytest.fixture
def network() -> Iterator[Network]:
    """HOSTS namespaces on a bridge; skipped (failed under CI) where namespaces are refused."""
    if shutil.which("ip") is None:
        _unavailable("the ip command (iproute2) is not installed")
    tag = f"obx{os.getpid() % 100000}"  # interface names stay within 15 characters
    probe = _ip("netns", "add", f"{tag}-probe", check=False)
    if probe.returncode != 0:
        _unavailable(f"ip netns add is not permitted here: {probe.stderr.strip()}")
    _ip("netns", "delete", f"{tag}-probe", check=False)
    net = Network(tag, _free_octet())
    try:
        net.build(HOSTS)
        yield net
    finally:
        net.tear_down()


class Relay:
    """A TCP forwarder: every connection to (host, port) is relayed to target.

    It counts connections by source address, so the test can tell which host spoke.
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


@dataclass
class PeerRecorder(Recorder):
    """The test SMTP recorder, also counting accepted mails by the client's address."""

    peers: Counter[str] = field(default_factory=Counter)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.peers[session.peer[0]] += 1
        return await super().handle_DATA(server, session, envelope)


@contextlib.contextmanager
def smtp_server(host: str) -> Iterator[tuple[PeerRecorder, int]]:
    """The recording SMTP server on host (the bridge address) and a free port."""
    with socket.create_server((host, 0)) as sock:
        port = sock.getsockname()[1]
    recorder = PeerRecorder()
    controller = RecordingController(recorder, hostname=host, port=port)
    controller.start()
    try:
        yield recorder, port
    finally:
        controller.stop()


def enqueue_wave(start: int, count: int) -> list[str]:
    """Insert count queued messages in one statement; return their Message-IDs."""
    now = utcnow()
    rows = [
        {"message_id": f"<hosts-{n}@example.com>", "from_addr": "outbox@example.com",
         "recipients": decode([{"kind": "to", "address": "rcpt@example.com"}]),
         "subject": f"hosts {n}", "text_body": "hi",
         "status": Status.QUEUED.value, "attempts": 0, "max_attempts": 5,
         "next_attempt_at": now, "created_at": now, "source": "test"}
        for n in range(start, start + count)
    ]  # fmt: skip
    db.session.execute(sa.insert(Message), rows)
    db.session.commit()
    return [r["message_id"] for r in rows]


def stop_all(started: list[subprocess.Popen[bytes]]) -> list[int | None]:
    """SIGTERM every process still running, wait for each; SIGKILL what will not stop."""
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    return [end(process, signal.SIGTERM, timeout=30) for process in started]


def test_workers_on_several_hosts_send_every_message_exactly_once(
    app, network: Network, tmp_path: Path
) -> None:
    relay_target = sa.engine.make_url(app.config["DATABASE_URL"])
    with (
        Relay(network.gateway, (relay_target.host, relay_target.port or 3306)) as relay,
        smtp_server(network.gateway) as (recorder, smtp_port),
    ):
        url = relay_target.set(host=network.gateway, port=relay.port)
        smtp = types.SimpleNamespace(port=smtp_port)
        env = worker_env(app, smtp, tmp_path, POLL_INTERVAL=0.2, BATCH_SIZE=20)
        env.update(
            OUTBOX_DATABASE_URL=url.render_as_string(hide_password=False),
            OUTBOX_MAIL_SERVER=network.gateway,
            OUTBOX_SECRET_KEY="test",
            PYTHONUNBUFFERED="1",
        )
        workers: dict[int, str] = {}  # pid -> namespace
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for name in network.hosts:
                for n in range(WORKERS_PER_HOST):
                    # `ip netns exec` execs the command: the pid is the worker's own.
                    command = ["ip", "netns", "exec", name, sys.executable, "-m",
                               "outbox", "worker"]  # fmt: skip
                    with open(tmp_path / f"{name}-{n}.log", "wb") as log:
                        process = start(command, env=env, stdout=log, stderr=log)
                    processes.append(process)
                    workers[process.pid] = name
            count = len(workers)

            def all_beating() -> bool:
                assert all(p.poll() is None for p in processes), "a worker exited early"
                found = db.session.execute(sa.select(sa.func.count(WorkerBeat.worker_id)))
                beating = found.scalar()
                db.session.commit()
                return beating == count

            wait_until(all_beating, timeout=60)
            started = time.monotonic()
            expected: list[str] = []
            size = MESSAGES // WAVES
            for wave in range(WAVES):
                expected += enqueue_wave(
                    wave * size, size if wave < WAVES - 1 else MESSAGES - wave * size
                )
                time.sleep(0.05)
            wait_until(lambda: statuses()[Status.SENT] >= MESSAGES, timeout=1800 if SOAK else 120)
            elapsed = time.monotonic() - started
            assert all(p.poll() is None for p in processes), "a worker exited early"
        finally:
            codes = stop_all(processes)
        assert codes == [0] * len(processes), [
            p.read_text()[-3000:] for p in tmp_path.glob("*.log")
        ]

    received = Counter(recorder.message_ids())
    duplicates = sum(n - 1 for n in received.values())
    lost = len(set(expected) - set(received))
    per_worker = _sent_per_worker()
    per_host: Counter[str] = Counter()
    for worker_id, n in per_worker.items():
        per_host[workers[_pid(worker_id)]] += n
    print(
        f"\nhosts: {MESSAGES} messages, {HOSTS} hosts x {WORKERS_PER_HOST} workers, "
        f"sent {received.total()} in {elapsed:.1f}s, per host {dict(sorted(per_host.items()))}, "
        f"per worker {sorted(per_worker.values())}, "
        f"duplicates {duplicates}, lost {lost}"
    )
    assert duplicates == 0 and lost == 0
    assert set(received) == set(expected)
    assert statuses() == {Status.SENT: MESSAGES}
    assert _outcomes() == {"sent": MESSAGES}
    # One id per worker: the hostname is the same in every namespace, the pid and
    # the random part tell them apart.
    beats = db.session.execute(sa.select(WorkerBeat)).scalars().all()
    assert len({b.worker_id for b in beats}) == len(workers)
    assert sorted(b.pid for b in beats) == sorted(workers)
    assert all(b.worker_id.split(":")[1] == str(b.pid) for b in beats)
    # Every host took part, and what each recorded is what its address delivered.
    by_address = {address: name for name, address in network.hosts.items()}
    assert set(per_host) == set(network.hosts), per_host
    assert {by_address[ip]: n for ip, n in recorder.peers.items()} == per_host
    assert set(relay.peers) == set(by_address), relay.peers


def test_idle_workers_on_other_hosts_pick_up_a_message_at_once_and_once(
    app, network: Network, tmp_path: Path
) -> None:
    relay_target = sa.engine.make_url(app.config["DATABASE_URL"])
    with (
        Relay(network.gateway, (relay_target.host, relay_target.port or 3306)) as relay,
        smtp_server(network.gateway) as (recorder, smtp_port),
    ):
        url = relay_target.set(host=network.gateway, port=relay.port)
        smtp = types.SimpleNamespace(port=smtp_port)
        # A tick far past any wait here: a mail that comes came because a worker was woken.
        env = worker_env(app, smtp, tmp_path, POLL_INTERVAL=900)
        env.update(
            OUTBOX_DATABASE_URL=url.render_as_string(hide_password=False),
            OUTBOX_MAIL_SERVER=network.gateway,
            OUTBOX_SECRET_KEY="test",
        )
        processes = []
        try:
            for name in network.hosts:
                command = ["ip", "netns", "exec", name, sys.executable, "-m", "outbox", "worker"]
                with open(tmp_path / f"{name}.log", "wb") as log:
                    processes.append(start(command, env=env, stdout=log, stderr=log))

            def all_beating() -> bool:
                assert all(p.poll() is None for p in processes), "a worker exited early"
                found = db.session.execute(sa.select(sa.func.count(WorkerBeat.worker_id)))
                beating = found.scalar()
                db.session.commit()
                return beating == len(processes)

            # A message stored while a first pass runs is sent by it or the pass after.
            wait_until(all_beating, timeout=START_TIMEOUT)
            wanted: list[str] = []
            for n in range(5):
                mail = draft(from_addr="outbox@example.com", to=["rcpt@example.com"], text=f"{n}")
                wanted.append(queue.enqueue(mail, source="test", max_attempts=3)[0].message_id)
                wait_until(lambda: set(wanted) <= set(recorder.message_ids()), timeout=120)
        finally:
            codes = stop_all(processes)
        assert codes == [0] * len(processes), [
            p.read_text()[-3000:] for p in tmp_path.glob("*.log")
        ]
    assert Counter(recorder.message_ids()) == dict.fromkeys(wanted, 1)
    assert set(recorder.peers) <= set(network.hosts.values()), recorder.peers


def _pid(worker_id: str) -> int:
    return int(worker_id.split(":")[1])


def _sent_per_worker() -> Counter[str]:
    """Sent attempts per worker id."""
    stmt = sa.select(Attempt.worker_id, sa.func.count()).where(Attempt.outcome == "sent")
    return Counter(dict(db.session.execute(stmt.group_by(Attempt.worker_id)).all()))


def _outcomes() -> Counter[str]:
    stmt = sa.select(Attempt.outcome, sa.func.count()).group_by(Attempt.outcome)
    return Counter(dict(db.session.execute(stmt).all()))
