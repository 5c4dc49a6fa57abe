"""Workers on several network hosts (network namespaces) share one database and one SMTP server.

Each host is a network namespace behind a bridge (tests.support.hosts). The shared
MariaDB listens on 127.0.0.1 only, so a relay on the bridge address forwards to it; the
SMTP server listens on the bridge address. The relay and the SMTP server see each
namespace's own address, which tells which host did what.

Short run: 600 messages, 3 hosts with one worker each. OUTBOX_SOAK=1: 20,000
messages, 3 hosts with two workers each. And immediate pickup across hosts: idle
workers with a tick far off send each message stored on this host, once.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
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
from tests.support import hosts
from tests.support.app import draft
from tests.support.hosts import Network, Relay
from tests.support.processes import START_TIMEOUT, end, start
from tests.support.rows import statuses
from tests.support.smtpd import Recorder, RecordingController
from tests.support.workers import wait_until, worker_env

SOAK = os.environ.get("OUTBOX_SOAK") == "1"
MESSAGES, HOSTS, WORKERS_PER_HOST, WAVES = (20_000, 3, 2, 40) if SOAK else (600, 3, 1, 6)

pytestmark = [
    pytest.mark.soak,
    pytest.mark.parametrize("db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)]),
]


def _unavailable(reason: str) -> None:
    """Skip, or fail under CI, where the machine is known to allow namespaces."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def network() -> Iterator[Network]:
    """HOSTS namespaces on a bridge; skipped (failed under CI) where namespaces are refused."""
    reason = hosts.refused()
    if reason is not None:
        _unavailable(reason)
    with hosts.network(HOSTS) as net:
        yield net


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
        # The hosts share this machine's files, so their doorbells would be in reach of
        # this process's rings: moved apart, as other machines are, the probe wakes them.
        app.instance_path = str(tmp_path / "this-host")
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
