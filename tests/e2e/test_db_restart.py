"""MariaDB restarts while clients post over HTTP and workers drain: nothing lost, nothing twice.

A private MariaDB server (its own datadir and port; the shared one on 3306 is left
alone) is stopped and started again under load. The web app runs in gunicorn and two
`outbox worker` processes drain, all with OUTBOX_* settings; none of them is restarted.
Clients post continuously with an Idempotency-Key each and post again on a 503: a
503 whose COMMIT reached the server just before it went down may have stored the
message, and the repeat then answers 201 with Idempotent-Replayed (counted as
"replays"). Every request must answer 201 or 503 within 10 seconds; every message
that got a 201 must be stored and reach the SMTP server exactly once.

Some outages begin while a mail is being handed to the SMTP server: the server stops
the database before it answers 250, the worst moment for the worker. The others
begin at whatever moment the schedule says.

Short run: one SIGTERM restart in about 15 seconds. OUTBOX_SOAK=1: a few minutes
with six restarts, by SIGTERM and SIGKILL, the server down for 1 to 5 seconds each.
"""

import contextlib
import http.client
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
import pytest
import sqlalchemy as sa
from flask_migrate import upgrade

from outbox import create_app
from outbox.auth import tokens
from outbox.models import utcnow
from outbox.models.db import dispose_engines
from tests.support import processes
from tests.support.smtpd import SmtpServer, free_port

SOAK = os.environ.get("OUTBOX_SOAK") == "1"
CLIENTS = 4
WORKERS = 2
# Seconds; short, so that claims stranded by an outage come back within the test. Every
# outage (stop, down_for, start) stays well within LOCK_TIMEOUT: past it, another worker
# may rightly take over a claim and send its message again.
SMTP_TIMEOUT, LOCK_TIMEOUT = 2.5, 10


@dataclass(frozen=True)
class Outage:
    at: float  # seconds after the clients start
    sig: signal.Signals
    in_data: bool  # begin while a mail is handed to the SMTP server, before its 250
    down_for: float  # seconds the server stays stopped


if SOAK:
    DURATION = 200.0
    OUTAGES = [
        Outage(15, signal.SIGTERM, True, 3),
        Outage(45, signal.SIGKILL, False, 5),
        Outage(75, signal.SIGKILL, True, 2),
        Outage(105, signal.SIGTERM, False, 4),
        Outage(135, signal.SIGTERM, True, 1),
        Outage(165, signal.SIGKILL, True, 5),
    ]
else:
    DURATION = 12.0
    OUTAGES = [Outage(4, signal.SIGTERM, True, 3)]

pytestmark = pytest.mark.soak


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _program(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
    if found is None:
        _unavailable(f"{name} is not installed")
    return str(found)


class PrivateMariaDB:
    """A MariaDB server of the test's own: its datadir, its port, started and stopped at will."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.datadir = root / "data"
        self.port = free_port()
        self.log = root / "mariadb.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.url = f"mysql+pymysql://root@127.0.0.1:{self.port}/outbox?charset=utf8mb4"
        self.token = ""  # an API token, made once the schema is there

    def install(self) -> None:
        command = [_program("mariadb-install-db"), "--no-defaults", f"--datadir={self.datadir}",
                   "--auth-root-authentication-method=normal", "--skip-test-db",
                   "--skip-name-resolve", f"--user={self.user}"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"mariadb-install-db failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        """Start the server and wait until it answers."""
        command = [_program("mariadbd"), "--no-defaults", f"--datadir={self.datadir}",
                   f"--port={self.port}", "--bind-address=127.0.0.1",
                   f"--socket={self.root / 'sock'}", f"--pid-file={self.root / 'pid'}",
                   f"--log-error={self.log}", "--skip-name-resolve", f"--user={self.user}",
                   "--innodb-buffer-pool-size=64M"]  # fmt: skip
        self.process = processes.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                pymysql.connect(
                    host="127.0.0.1", port=self.port, user="root", connect_timeout=1
                ).close()
                return
            except pymysql.err.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"mariadbd did not start:\n{self.log.read_text()[-3000:]}"
                    ) from None
                time.sleep(0.05)

    def signal(self, sig: signal.Signals) -> None:
        """Send sig and return once the server takes no more statements."""
        assert self.process is not None
        self.process.send_signal(sig)
        # The server closes its port, then cuts every client connection at once.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                break
            time.sleep(0.01)
        time.sleep(0.3)

    def wait_stopped(self) -> None:
        assert self.process is not None
        self.process.wait(timeout=60)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            processes.end(self.process, signal.SIGTERM, timeout=60)
            self.process = None


@pytest.fixture
def mariadb(tmp_path: Path) -> Iterator[PrivateMariaDB]:
    """A private, migrated MariaDB server holding one API token."""
    server = PrivateMariaDB(tmp_path)
    server.install()
    try:
        server.start()
        with contextlib.closing(
            pymysql.connect(host="127.0.0.1", port=server.port, user="root")
        ) as conn:
            conn.cursor().execute("CREATE DATABASE outbox CHARACTER SET utf8mb4")
        app = create_app({"DATABASE_URL": server.url, "SECRET_KEY": "test"})
        with app.app_context():
            upgrade()
            server.token = tokens.create("restart")
            dispose_engines()
        yield server
    finally:
        server.stop()


def _env(mariadb: PrivateMariaDB, smtp: SmtpServer, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.update(
        OUTBOX_DATABASE_URL=mariadb.url,
        OUTBOX_INSTANCE_PATH=str(tmp_path),
        OUTBOX_SECRET_KEY="test",
        OUTBOX_MAIL_PORT=str(smtp.port),
        OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com",
        OUTBOX_POLL_INTERVAL="0.2",
        OUTBOX_BATCH_SIZE="20",
        OUTBOX_SMTP_TIMEOUT=str(SMTP_TIMEOUT),
        OUTBOX_LOCK_TIMEOUT=str(LOCK_TIMEOUT),
        OUTBOX_RETRY_DELAY="1",
    )
    return env


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return processes.start(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, wait; then SIGKILL what is left of its group (gunicorn's workers too)."""
    return processes.end(process, signal.SIGTERM, timeout=30)


@dataclass
class Tally:
    """What the clients saw."""

    codes: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    errors: list[str] = field(default_factory=list)
    accepted: dict[str, tuple[int, str]] = field(default_factory=dict)  # key -> (id, Message-ID)
    replayed: int = 0  # 201s for a key whose earlier request got a 503
    abandoned: list[str] = field(default_factory=list)  # keys that never got a 201
    lock: threading.Lock = field(default_factory=threading.Lock)


class Clients:
    """Threads posting messages continuously, each with an Idempotency-Key, again on a 503."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.tally = Tally()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(CLIENTS)]
        self.crashes: list[BaseException] = []

    def __enter__(self) -> "Clients":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _run(self, n: int) -> None:
        try:
            seq = 0
            while not self.stop.is_set():
                self._post_until_accepted(f"c{n}-{seq}")
                seq += 1
                time.sleep(0.01)
        except BaseException as exc:  # handed to the test, not lost in the thread
            self.crashes.append(exc)

    def _post_until_accepted(self, key: str) -> None:
        body = json.dumps({"to": ["rcpt@example.com"], "subject": f"restart {key}", "text": "hi"})
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Idempotency-Key": key}  # fmt: skip
        give_up = None
        while True:
            status, reply, replayed = self._post(body.encode(), headers)
            with self.tally.lock:
                if status is None:
                    self.tally.abandoned.append(key)
                    return
                self.tally.codes[status] += 1
                if status == 201:
                    self.tally.accepted[key] = (reply["id"], reply["message_id"])
                    self.tally.replayed += replayed
                    return
                if status != 503:
                    self.tally.errors.append(f"{key}: {status} {reply}")
                    self.tally.abandoned.append(key)
                    return
            if self.stop.is_set():
                give_up = give_up or time.monotonic() + 30
                if time.monotonic() > give_up:
                    with self.tally.lock:
                        self.tally.abandoned.append(key)
                    return
            time.sleep(0.1)

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int | None, dict, bool]:  # type: ignore[type-arg]
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", "/api/messages", body, headers)
            response = conn.getresponse()
            data = response.read()
        except TimeoutError:
            with self.tally.lock:
                self.tally.timeouts += 1
            return None, {}, False
        except (OSError, http.client.HTTPException) as exc:
            with self.tally.lock:
                self.tally.errors.append(f"{type(exc).__name__}: {exc}")
            return None, {}, False
        finally:
            conn.close()
        try:
            reply = json.loads(data)
        except ValueError:
            reply = {"body": data[:200].decode("utf-8", "replace")}
        return response.status, reply, response.getheader("Idempotent-Replayed") == "true"


class Breaker:
    """Stops the database, either at once or from inside the SMTP server's DATA handler."""

    def __init__(self, mariadb: PrivateMariaDB, smtp: SmtpServer) -> None:
        self.mariadb, self.smtp = mariadb, smtp
        self.lock = threading.Lock()
        self.fired = threading.Event()
        self.problems: list[BaseException] = []

    def _halt(self, sig: signal.Signals) -> None:
        with self.lock:
            if self.fired.is_set():
                return
            try:
                self.mariadb.signal(sig)
            except BaseException as exc:  # never let the SMTP server answer an error
                self.problems.append(exc)
            self.fired.set()

    def outage(self, outage: Outage) -> str:
        """Stop the server as the outage says, wait, start it again; return how it began."""
        self.fired.clear()
        how = "at once"
        if outage.in_data:
            self.smtp.recorder.on_data = lambda: self._halt(outage.sig)
            if self.fired.wait(timeout=10):
                how = "in DATA"
            self.smtp.recorder.on_data = None
        self._halt(outage.sig)
        self.mariadb.wait_stopped()
        time.sleep(outage.down_for)
        self.mariadb.start()
        return how


def _query(url: str, statement: str, **params: object) -> list[tuple]:  # type: ignore[type-arg]
    engine = sa.create_engine(url)
    try:
        query = sa.text(statement)
        for name, value in params.items():
            if isinstance(value, tuple):  # a list for IN
                query = query.bindparams(sa.bindparam(name, expanding=True))
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(query, params)]
    finally:
        engine.dispose()


def _wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@dataclass
class Services:
    """gunicorn with two web processes, and the worker processes."""

    port: int
    logs: Path
    web: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def all(self) -> list[subprocess.Popen[bytes]]:
        return [*self.workers, *([self.web] if self.web else [])]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.all())

    def stop(self) -> list[int | None]:
        """SIGTERM each, workers first; their exit codes (None: had to be killed)."""
        return [_stop(p) for p in self.all()]

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.logs.glob("*.log"))


@contextlib.contextmanager
def services(mariadb: PrivateMariaDB, smtp: SmtpServer, logs: Path) -> Iterator[Services]:
    """Start gunicorn and the workers, wait until they are ready; stop them on the way out."""
    env = _env(mariadb, smtp, logs)
    found = Services(free_port(), logs)
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    try:
        found.web = _spawn([gunicorn, "-w", "2", "-b", f"127.0.0.1:{found.port}",
                            "--timeout", "30", "--graceful-timeout", "5", "outbox:create_app()"],
                           env, logs / "gunicorn.log")  # fmt: skip
        for n in range(WORKERS):
            worker = [sys.executable, "-m", "outbox", "worker"]
            found.workers.append(_spawn(worker, env, logs / f"worker-{n}.log"))

        def ready() -> bool:
            assert found.alive(), found.log()
            beats = _query(mariadb.url, "SELECT COUNT(*) FROM workers")[0][0]
            return beats == WORKERS and _get(found.port, mariadb.token, "/api/messages/0") == 404

        assert _wait_for(ready, timeout=processes.START_TIMEOUT), found.log()
        yield found
    finally:
        found.stop()


def _get(port: int, token: str, path: str) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        conn.close()


def _drain(mariadb: PrivateMariaDB, smtp: SmtpServer, expected: set[str], stall: float) -> None:
    """Wait until every accepted message is sent, or until nothing moves for stall seconds."""
    seen, moved_at = None, time.monotonic()
    while True:
        waiting = _query(mariadb.url, "SELECT COUNT(*) FROM messages WHERE status <> 'sent'")
        now = (waiting[0][0], len(expected - set(smtp.recorder.message_ids())))
        if now == (0, 0) or time.monotonic() - moved_at > stall:
            return
        if now != seen:
            seen, moved_at = now, time.monotonic()
        time.sleep(0.2)


class EngineBug(AssertionError):
    """What the database outages would show the worker doing wrong: claims taken back
    as "worker lost", messages sent twice."""


def test_database_restarts_lose_nothing_and_send_nothing_twice(
    mariadb: PrivateMariaDB, smtp: SmtpServer, tmp_path: Path
) -> None:
    with services(mariadb, smtp, tmp_path) as running:
        breaker = Breaker(mariadb, smtp)
        hows: list[str] = []
        with Clients(running.port, mariadb.token) as clients:
            started = time.monotonic()
            for outage in OUTAGES:
                time.sleep(max(0.0, started + outage.at - time.monotonic()))
                hows.append(f"{outage.sig.name} {breaker.outage(outage)} {outage.down_for:g}s")
                up_at = utcnow()
            time.sleep(max(0.0, started + DURATION - time.monotonic()))
        assert not clients.crashes and not breaker.problems, (clients.crashes, breaker.problems)
        tally = clients.tally
        expected = {message_id for _, message_id in tally.accepted.values()}

        _drain(mariadb, smtp, expected, stall=2 * LOCK_TIMEOUT + 10)
        alive = running.alive()
        codes = running.stop()
        logs = running.log()

    received = Counter(smtp.recorder.message_ids())
    duplicates = sum(n - 1 for n in received.values())
    lost = len(expected - set(received))
    stored = {
        row[0]: row[1:]
        for row in _query(mariadb.url, "SELECT id, message_id, status FROM messages")
    }
    outcomes = Counter(
        dict(_query(mariadb.url, "SELECT outcome, COUNT(*) FROM attempts GROUP BY outcome"))
    )
    print(
        f"\ndb restart: {len(tally.accepted)} messages, 2 web processes + {WORKERS} workers, "
        f"{len(OUTAGES)} restarts ({', '.join(hows)}), 201s {tally.codes[201]} "
        f"(replays of a 503 {tally.replayed}), 503s {tally.codes[503]}, 500s {tally.codes[500]}, "
        f"other answers {sum(n for c, n in tally.codes.items() if c not in (201, 503, 500))}, "
        f"timeouts {tally.timeouts}, errors {len(tally.errors)}, "
        f"claims taken back as 'worker lost' {outcomes['worker lost']}, "
        f"duplicates {duplicates}, lost {lost}"
    )
    assert set(tally.codes) <= {201, 503}, (tally.codes, tally.errors[:5])
    assert tally.timeouts == 0 and not tally.errors and not tally.abandoned, tally.errors[:5]
    assert tally.codes[503] > 0, "no request met an outage"
    # Every 201 is stored, and nothing else is.
    assert sorted(stored) == sorted(i for i, _ in tally.accepted.values())
    assert {m for m, _ in stored.values()} == expected
    # Nobody was restarted: the same processes ran throughout and stopped cleanly.
    assert alive and codes == [0] * (WORKERS + 1), logs
    booted = (tmp_path / "gunicorn.log").read_text().count("Booting worker")
    assert booted == 2, f"a web process was replaced\n{logs}"
    since = "SELECT DISTINCT worker_id FROM attempts WHERE finished_at > :up"
    assert len(_query(mariadb.url, since, up=up_at)) == WORKERS, "a worker did not reconnect"
    if lost:
        left = _query(mariadb.url, "SELECT status, locked_by, COUNT(*), MIN(next_attempt_at), "
                      "MAX(attempts) FROM messages WHERE status <> 'sent' "
                      "GROUP BY status, locked_by")  # fmt: skip
        raise AssertionError(f"{lost} accepted messages never reached the SMTP server: {left}")
    assert set(received) == expected
    assert {status for _, status in stored.values()} == {"sent"}
    bugs = []
    if outcomes["worker lost"]:
        bugs.append(f"{outcomes['worker lost']} claims of live workers were left until "
                    f"LOCK_TIMEOUT and taken back as 'worker lost'")  # fmt: skip
    if duplicates:
        twice = [m for m, n in received.items() if n > 1]
        history = _query(mariadb.url, "SELECT m.message_id, a.worker_id, a.outcome, a.error "
                         "FROM attempts a JOIN messages m ON m.id = a.message_pk "
                         "WHERE m.message_id IN :ids ORDER BY a.id",
                         ids=tuple(twice[:3]))  # fmt: skip
        bugs.append(f"{duplicates} messages sent twice, e.g. {history}")
    if bugs:
        raise EngineBug("; ".join(bugs))
