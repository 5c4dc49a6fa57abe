"""The API under the HTTP servers the docs name for production, gunicorn and granian, on MariaDB.

Each runs as deploy/ sets it up (two processes, four threads each): clients post over
keep-alive connections a mix of good, bad, chunked, repeated and abandoned requests,
schemathesis fuzzes the API over HTTP, and a SIGTERM with a request half sent must end
every process of the server. The database must hold exactly the messages acknowledged.
"""

import contextlib
import http.client
import json
import os
import random
import shlex
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db
from tests.support import processes
from tests.support.fuzz import CHECKS, MODES, stored_whole
from tests.support.smtpd import free_port
from tests.support.soak import size

pytestmark = [
    pytest.mark.soak,
    pytest.mark.parametrize(
        "db_kind", [pytest.param("mariadb", marks=pytest.mark.mariadb)], indirect=True
    ),  # fmt: skip
]
BIN = Path(sys.executable).parent
LIMIT = 100_000  # OUTBOX_MAX_MESSAGE_BYTES here: a larger body is refused with 413
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _granian(port: int) -> list[str]:
    """deploy/outbox-web-granian.service's ExecStart, with this venv's granian, on port."""
    unit = (DEPLOY / "outbox-web-granian.service").read_text().splitlines()
    words = shlex.split(next(x for x in unit if x.startswith("ExecStart=")).partition("=")[2])
    words[0] = str(BIN / "granian")
    words[words.index("--port") + 1] = str(port)
    return words


# granian as deploy/ runs it; gunicorn as deploy/gunicorn.conf.py sets it up (processes,
# threads, graceful stop), which tests/e2e/test_deploy.py starts as it is.
COMMANDS = {
    "gunicorn": lambda port: [str(BIN / "gunicorn"), "--workers", "2", "--worker-class",
                              "gthread", "--threads", "4", "--bind", f"127.0.0.1:{port}",
                              "--graceful-timeout", "30", "outbox:create_app()"],
    "granian": _granian,
}  # fmt: skip


# The flags with which each server bounds its graceful stop before it kills what is left.
STOP_FLAGS = ("--workers-kill-timeout", "--graceful-timeout")


def _stop_bound(command: list[str]) -> float:
    """Seconds the server's command gives a process to finish before it is killed."""
    return next(float(command[i + 1]) for i, w in enumerate(command) if w in STOP_FLAGS)


@dataclass
class Server:
    port: int
    process: Any = None  # subprocess.Popen, leading a process group
    stop_bound: float = 0.0  # seconds a graceful stop may take before the kill (its flag)

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)


@pytest.fixture(params=sorted(COMMANDS))
def server(request: pytest.FixtureRequest, app, tmp_path: Path) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    """outbox under one of the servers, answering; the whole group killed at the end."""
    found = Server(free_port())
    env = dict(os.environ, OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_SECRET_KEY="test",
               OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com",
               OUTBOX_MAX_MESSAGE_BYTES=str(LIMIT))  # fmt: skip
    command = COMMANDS[request.param](found.port)
    with (tmp_path / "server.log").open("w") as log, \
         processes.group(command, env=env, stdout=log, stderr=log) as process:  # fmt: skip
        found.process, found.stop_bound = process, _stop_bound(command)
        deadline = time.monotonic() + processes.START_TIMEOUT
        while not _answers(found):
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, f"{request.param} did not answer"
            time.sleep(0.1)
        yield found


def _answers(server: Server) -> bool:
    conn = server.connect()
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _message(n: int) -> dict[str, str]:
    return {"from": "Shop <shop@example.com>", "to": f"c{n}@example.com",
            "subject": f"order {n}", "text": "shipped\n"}  # fmt: skip


@dataclass
class Seen:
    """What the clients saw: the answers of each kind of request, and the ids acknowledged."""

    answers: Counter[tuple[str, int]] = field(default_factory=Counter)
    ids: set[int] = field(default_factory=set)
    keyed: dict[str, int] = field(default_factory=dict)  # Idempotency-Key -> first id
    lock: threading.Lock = field(default_factory=threading.Lock)


KINDS = ["valid", "valid", "valid", "keyed", "chunked", "bad field", "bad json", "too large",
         "abandoned"]  # fmt: skip
EXPECTED = {"valid": 201, "keyed": 201, "chunked": 201, "bad field": 422, "bad json": 400,
            "too large": 413}  # fmt: skip


def _request(server: Server, conn: http.client.HTTPConnection, kind: str, n: int,
             auth: dict[str, str]) -> http.client.HTTPResponse | None:  # fmt: skip
    """Send one request of a kind over conn (or, abandoned, half of one on a socket of its own)."""
    headers = {**auth, "Content-Type": "application/json"}
    body = json.dumps(_message(n)).encode()
    if kind == "abandoned":
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            sock.sendall(f"POST /api/messages HTTP/1.1\r\nHost: x\r\n{head}Content-Length: "
                         f"{len(body)}\r\n\r\n".encode() + body[:20])  # fmt: skip
        return None
    if kind == "keyed":
        key = f"key-{n % 7}"
        headers["Idempotency-Key"], body = key, json.dumps(_message(n % 7)).encode()
    elif kind == "bad field":
        body = json.dumps({"to": "not an address", "text": "x"}).encode()
    elif kind == "bad json":
        body = b'{"to": "a@example.com", "text": '
    elif kind == "too large":
        body = json.dumps({**_message(n), "text": "x" * LIMIT}).encode()
    if kind == "chunked":
        conn.putrequest("POST", "/api/messages")
        for name, value in {**headers, "Transfer-Encoding": "chunked"}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    else:
        conn.request("POST", "/api/messages", body=body, headers=headers)
    return conn.getresponse()


def _client(server: Server, number: int, auth: dict[str, str], until: float, seen: Seen) -> None:
    """Post requests of random kinds until the time is up, reconnecting when the server closes."""
    chosen = random.Random(number)
    conn = server.connect()
    n = number * 1_000_000
    while time.monotonic() < until:
        kind, n = chosen.choice(KINDS), n + 1
        try:
            response = _request(server, conn, kind, n, auth)
        except (OSError, http.client.HTTPException):  # the server closed after a 413
            conn.close()
            conn = server.connect()
            response = _request(server, conn, kind, n, auth) if kind != "too large" else None
        if response is None:
            continue
        answer = response.read()
        with seen.lock:
            seen.answers[(kind, response.status)] += 1
            if response.status == 201:
                pk = json.loads(answer)["id"]
                seen.ids.add(pk)
                if kind == "keyed":
                    assert seen.keyed.setdefault(f"key-{n % 7}", pk) == pk
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = server.connect()
    conn.close()


def _stored() -> set[int]:
    db.session.commit()
    return set(db.session.scalars(sa.select(Message.id)))


def test_served_api_stores_exactly_what_it_acknowledged_under_mixed_load(server, app):
    auth = {"Authorization": f"Bearer {tokens.create('served')}"}
    seen, until = Seen(), time.monotonic() + size(60.0, 3.0)
    threads = [threading.Thread(target=_client, args=(server, n, auth, until, seen))
               for n in range(4)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    wrong = {k: n for k, n in seen.answers.items() if EXPECTED[k[0]] != k[1]}
    assert not wrong, f"unexpected answers: {wrong}"
    assert {kind for kind, _ in seen.answers} == set(EXPECTED), seen.answers
    assert _stored() == seen.ids
    assert stored_whole() == []
    assert server.process.poll() is None


def test_sigterm_with_a_request_half_sent_ends_every_process(server, app):
    """A client that never finishes its body must not keep a process of the server alive."""
    auth = {"Authorization": f"Bearer {tokens.create('served')}"}
    conn = server.connect()
    assert _request(server, conn, "valid", 1, auth).status == 201  # type: ignore[union-attr]
    stuck = socket.create_connection(("127.0.0.1", server.port))
    stuck.sendall(b"POST /api/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 1000\r\n\r\n{\"to\": ")  # fmt: skip
    time.sleep(0.5)
    server.process.send_signal(signal.SIGTERM)
    try:
        # The stuck process ends at the server's kill timeout: wait well past it.
        assert server.process.wait(timeout=server.stop_bound + 60) == 0
        deadline = time.monotonic() + 15
        while _group_alive(server.process.pid):
            assert time.monotonic() < deadline, "a process of the server outlived it"
            time.sleep(0.1)
    finally:
        stuck.close()
        conn.close()
    assert len(_stored()) == 1


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        # A thread may end between the listing and the read (granian's did, under load).
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            found.update(int(p) for p in (task / "children").read_text().split())
    return found


def test_sighup_replaces_every_web_process_while_the_api_answers(server, app):
    """`systemctl reload outbox-web`: new processes (on new code), no request lost."""
    auth = {"Authorization": f"Bearer {tokens.create('served')}"}
    before = _children(server.process.pid)
    server.process.send_signal(signal.SIGHUP)
    acknowledged: set[int] = set()
    deadline = time.monotonic() + 60
    while (now := _children(server.process.pid)) & before or len(now) < len(before):
        assert time.monotonic() < deadline, f"still running after HUP: {now & before}"
        acknowledged.add(_post_safely(server, len(acknowledged), auth))
    assert acknowledged and _stored() == acknowledged


def _post_safely(server: Server, n: int, auth: dict[str, str], tries: int = 3) -> int:
    """POST message n as a careful client does; the id acknowledged.

    A process being replaced closes the connections it holds: the request goes again on
    a new one, with the same Idempotency-Key, so an answer lost on the way queues nothing twice.
    """
    headers = {**auth, "Content-Type": "application/json", "Idempotency-Key": f"reload-{n}"}
    for _ in range(tries - 1):
        try:
            return _post(server, json.dumps(_message(n)), headers)
        except ConnectionRefusedError:  # between the old listener's close and the new one's
            _until_listening(server)
        except ConnectionError:  # RemoteDisconnected and BrokenPipe too
            pass
    return _post(server, json.dumps(_message(n)), headers)


def _until_listening(server: Server, within: float = 30.0) -> None:
    """Wait until the server takes connections again (a loaded machine's reload is slow)."""
    deadline = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
            return
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "no listener again after the reload"
            time.sleep(0.05)


def _post(server: Server, body: str, headers: dict[str, str]) -> int:
    """POST a message on a new connection; the id of the 201 it must answer."""
    conn = server.connect()
    try:
        conn.request("POST", "/api/messages", body=body, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        assert response.status == 201, (response.status, answer)
        return int(json.loads(answer)["id"])
    finally:
        conn.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_fuzzed_api_over_http_answers_as_described(server, app):
    auth = {"Authorization": f"Bearer {tokens.create('fuzz')}"}
    url = f"http://127.0.0.1:{server.port}/api/openapi.json"
    schema = schemathesis.openapi.from_url(url, headers=auth).include(path_regex="^/api/messages")
    answers: Counter[int] = Counter()
    created: set[int] = set()

    def fuzz(operation: schemathesis.APIOperation, mode: schemathesis.GenerationMode) -> None:
        @settings(max_examples=size(300, 25), derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=operation.as_strategy(generation_mode=mode))
        def call(case: schemathesis.Case) -> None:
            response = case.call(headers=auth, timeout=30)
            answers[response.status_code] += 1
            if response.status_code == 201 and case.operation.path == "/api/messages":
                created.add(response.json()["id"])
            case.validate_response(response, checks=CHECKS)

        call()

    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() == "POST" and "{" not in operation.path:
            for mode in MODES:
                fuzz(operation, mode)
    assert answers, "nothing was fuzzed"
    assert 500 not in answers and 502 not in answers
    assert created <= _stored()
    assert stored_whole() == []
