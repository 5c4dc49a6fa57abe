"""`outbox smtpd` for the tests: a trustme certificate, the real process, and the byte check."""

import os
import resource
import smtplib
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from flask import Flask

from outbox.auth import tokens

from . import processes
from .smtpd import free_port

BIN = Path(sys.executable).parent
# What outbox may add to a submitted mail's header (RFC 6409 8: Message-ID and Date when
# missing; a DKIM signature when the domain has a key), and the fields it takes out.
ADDED = {b"message-id", b"date", b"dkim-signature"}
TAKEN_OUT = {b"bcc", b"resent-bcc"}


@dataclass
class Certs:
    """A trustme CA and a certificate for 127.0.0.1 and localhost, written as PEM files."""

    ca: trustme.CA
    cert: Path  # the chain
    key: Path
    ca_file: Path

    @classmethod
    def make(cls, directory: Path) -> "Certs":
        ca = trustme.CA()
        issued = ca.issue_cert("127.0.0.1", "localhost")
        cert, key, ca_file = directory / "cert.pem", directory / "key.pem", directory / "ca.pem"
        issued.private_key_pem.write_to_path(str(key))
        with cert.open("wb") as out:
            for blob in issued.cert_chain_pems:
                out.write(blob.bytes())
        ca.cert_pem.write_to_path(str(ca_file))
        return cls(ca, cert, key, ca_file)

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this CA, and checks the host name."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def answers(port: int) -> bool:
    """True once a server on port greets with 220."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            return sock.recv(100).startswith(b"220")
    except OSError:
        return False


@dataclass
class Smtpd:
    port: int
    process: subprocess.Popen  # type: ignore[type-arg]
    log: Path
    tls_port: int | None = None  # --listen-tls: TLS from the first byte


@contextmanager
def running(
    database_url: str, tmp_path: Path, certs: Certs | None, listen_tls: bool = False,
    open_files: int | None = None, **settings: str,
) -> Iterator[Smtpd]:  # fmt: skip
    """`outbox smtpd` on a free port with these OUTBOX_* settings, greeting; its exit is 0.

    listen_tls: on a second free port with implicit TLS as well (--listen-tls).
    open_files: the process's soft limit of open files at start (systemd's default: 1,024).
    """
    port, tls_port = free_port(), free_port() if listen_tls else None
    env = dict(os.environ, OUTBOX_DATABASE_URL=database_url, OUTBOX_SECRET_KEY="test",
               OUTBOX_INSTANCE_PATH=str(tmp_path), PYTHONUNBUFFERED="1")  # fmt: skip
    if certs:
        env.update(OUTBOX_SMTPD_TLS_CERT=str(certs.cert), OUTBOX_SMTPD_TLS_KEY=str(certs.key))
    env.update({f"OUTBOX_{name}": value for name, value in settings.items()})
    command = [str(BIN / "outbox"), "smtpd", "--listen", f"127.0.0.1:{port}"]
    if tls_port is not None:
        command += ["--listen-tls", f"127.0.0.1:{tls_port}"]
    log = tmp_path / f"smtpd-{port}.log"
    limit = {"preexec_fn": lambda: soft_open_files(open_files)} if open_files else {}
    with log.open("w") as out, processes.group(command, env=env, stdout=out, stderr=out,
                                               **limit) as proc:  # fmt: skip
        deadline = time.monotonic() + processes.START_TIMEOUT
        while not answers(port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"outbox smtpd did not answer:\n{log.read_text()}"
            time.sleep(0.1)
        yield Smtpd(port, proc, log, tls_port)
        assert processes.end(proc) == 0, log.read_text()


def soft_open_files(count: int) -> None:
    """Set this process's soft limit of open files, keeping the hard one."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))


def connect(port: int, certs: Certs, name: str, token: str) -> smtplib.SMTP:
    """An smtplib client that said STARTTLS (checking the certificate) and logged in."""
    client = smtplib.SMTP("127.0.0.1", port, timeout=30)
    try:
        client.starttls(context=certs.client_context())
        client.login(name, token)
    except BaseException:
        client.close()
        raise
    return client


def fields(head: bytes) -> list[bytes]:
    """The header fields of a header block, each with its folded lines and CRLF."""
    found: list[bytes] = []
    for line in head.split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and found:
            found[-1] += line + b"\r\n"
        else:
            found.append(line + b"\r\n")
    return found


def split(mail: bytes) -> tuple[list[bytes], bytes]:
    end = mail.index(b"\r\n\r\n") + 2
    return fields(mail[:end]), mail[end:]


def name_of(field: bytes) -> bytes:
    return field.partition(b":")[0].strip().lower()


def assert_intact(sent: bytes, received: bytes) -> list[bytes]:
    """Assert received is sent byte for byte, less TAKEN_OUT fields, plus only ADDED; the added.

    The body must be the same bytes; the header fields the client wrote must come in
    the same order with the same bytes.
    """
    sent_fields, sent_body = split(sent)
    got_fields, got_body = split(received)
    assert got_body == sent_body
    kept = [f for f in sent_fields if name_of(f) not in TAKEN_OUT]
    added = [f for f in got_fields if f not in kept]
    assert [f for f in got_fields if f in kept] == kept
    assert {name_of(f) for f in added} <= ADDED, added
    sent_names = {name_of(f) for f in sent_fields}
    assert not any(name_of(f) in sent_names for f in added if name_of(f) != b"dkim-signature")
    return added


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Python code in a process of its own (a Django settings module is once a process)."""
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA and a server certificate for outbox smtpd's STARTTLS, made once a run."""
    return Certs.make(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def token(app: Flask) -> str:
    """An API token that may send, the password an SMTP client logs in with."""
    return tokens.create("shop", scopes=("send",))


@pytest.fixture
def port(app: Flask, database_url: str, tmp_path: Path, certs: Certs) -> Iterator[int]:
    """outbox smtpd as a process on the test's database, with STARTTLS; its port."""
    with running(database_url, tmp_path, certs) as smtpd:
        yield smtpd.port
