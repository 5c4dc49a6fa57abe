"""smtp.open_host against real TLS servers: certificates, host names, logins, opt-outs."""

import ipaddress
import logging
import os
import signal
import smtplib
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from outbox import config, create_app, smtp
from outbox.capabilities.routes.config import load
from outbox.config import DEFAULTS
from outbox.core.status import Status
from outbox.worker import Worker
from tests.support import processes
from tests.support.app import base_config
from tests.support.rows import fresh
from tests.support.smtpd import SilentServer, free_port
from tests.support.tlscerts import PASSWORD, USER, Server, point_at

MODES = ["starttls", "ssl"]  # OUTBOX_MAIL_USE_TLS, OUTBOX_MAIL_USE_SSL


@dataclass
class SelfSigned:
    """A certificate for 127.0.0.1 signed by its own key; configure_cert as trustme's."""

    cert: bytes
    key: bytes

    def configure_cert(self, context: ssl.SSLContext) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "cert.pem"
            path.write_bytes(self.key + self.cert)
            context.load_cert_chain(path)


def self_signed(ip: str = "127.0.0.1") -> SelfSigned:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return SelfSigned(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def settings(at: Server, mode: str | None, **extra: Any) -> smtp.HostSettings:
    values: dict[str, Any] = {"server": "127.0.0.1", "port": at.port, "timeout": 5.0,
                              "use_tls": mode == "starttls", "use_ssl": mode == "ssl"}  # fmt: skip
    return smtp.HostSettings(**(values | extra))


def send_one(host: smtplib.SMTP) -> None:
    try:
        host.sendmail("outbox@example.com", ["rcpt@example.com"], b"Subject: hi\r\n\r\nhi\r\n")
    finally:
        host.quit()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_the_private_ca_of_the_ca_file_is_trusted_and_the_mail_arrives(
    mode, name, good_cert, ca_file
):
    with Server(mode, good_cert) as server:
        send_one(smtp.open_host(settings(server, mode, server=name, ca_file=ca_file)))
    assert [m.rcpt_tos for m in server.recorder.received] == [["rcpt@example.com"]]


def test_a_routes_files_relative_ca_file_is_read_beside_it_wherever_outbox_runs(
    good_cert, ca, tmp_path, monkeypatch
):
    """instance/routes.toml with ca_file = "relay-ca.pem": the CA beside the file is trusted,
    not a file of that name in the folder the worker was started from."""
    folder, elsewhere = tmp_path / "instance", tmp_path / "started-here"
    folder.mkdir()
    elsewhere.mkdir()
    ca.cert_pem.write_to_path(str(folder / "relay-ca.pem"))
    (elsewhere / "relay-ca.pem").write_text("not a certificate\n")
    monkeypatch.chdir(elsewhere)
    with Server("starttls", good_cert) as server:
        routes_file = folder / "routes.toml"
        routes_file.write_text(f'[[routes]]\nname = "relay"\nhost = "127.0.0.1"\n'
                               f'port = {server.port}\nca_file = "relay-ca.pem"\n')  # fmt: skip
        (route,) = load(routes_file, DEFAULTS, {}).routes.values()
        assert route.settings.ca_file == str(folder / "relay-ca.pem")
        send_one(smtp.open_host(route.settings))
    assert [m.rcpt_tos for m in server.recorder.received] == [["rcpt@example.com"]]


@pytest.mark.parametrize("mode", MODES)
def test_without_the_ca_file_the_private_ca_is_not_trusted(mode, good_cert):
    with Server(mode, good_cert) as server, pytest.raises(smtp.TlsError) as caught:
        smtp.open_host(settings(server, mode))
    where = f"127.0.0.1:{server.port}"
    assert str(caught.value) == (
        f"TLS certificate of {where} not trusted: unable to get local issuer certificate"
    )
    assert server.recorder.received == []


@pytest.mark.parametrize("mode", MODES)
def test_a_self_signed_certificate_is_refused_before_the_password_goes(mode, ca_file):
    with Server(mode, self_signed()) as server, pytest.raises(smtp.TlsError) as caught:
        smtp.open_host(settings(server, mode, ca_file=ca_file, username=USER, password=PASSWORD))
    where = f"127.0.0.1:{server.port}"
    assert str(caught.value) == f"TLS certificate of {where} not trusted: self-signed certificate"
    assert server.logins.seen == []


@pytest.mark.parametrize("mode", MODES)
def test_a_certificate_for_another_host_is_refused(mode, ca, ca_file):
    with Server(mode, ca.issue_cert("mail.example.org")) as server:
        with pytest.raises(smtp.TlsError) as caught:
            smtp.open_host(settings(server, mode, ca_file=ca_file, username=USER,
                                    password=PASSWORD))  # fmt: skip
        with pytest.raises(smtp.TlsError, match="Hostname mismatch.*'localhost'"):
            smtp.open_host(settings(server, mode, server="localhost", ca_file=ca_file))
    where = f"127.0.0.1:{server.port}"
    assert str(caught.value) == (
        f"TLS certificate of {where} not trusted: "
        "IP address mismatch, certificate is not valid for '127.0.0.1'."
    )
    assert server.logins.seen == []


@pytest.mark.parametrize("mode", MODES)
def test_with_verify_off_a_self_signed_certificate_passes(mode):
    with Server(mode, self_signed()) as server:
        host = smtp.open_host(settings(server, mode, verify=False, username=USER,
                                       password=PASSWORD))  # fmt: skip
        send_one(host)
    assert len(server.recorder.received) == 1
    assert server.logins.seen == [("CRAM-MD5", USER.encode(), True)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", ["CRAM-MD5", "PLAIN", "LOGIN"])
def test_a_utf8_password_logs_in(mode, mechanism, good_cert, ca_file):
    others = {"CRAM-MD5", "PLAIN", "LOGIN"} - {mechanism}
    with Server(mode, good_cert, auth_exclude_mechanism=others) as server:
        host = smtp.open_host(settings(server, mode, ca_file=ca_file, username=USER,
                                       password=PASSWORD))  # fmt: skip
        send_one(host)
    assert server.logins.seen == [(mechanism, USER.encode(), True)]
    assert len(server.recorder.received) == 1


def test_a_utf8_user_name_logs_in_with_plain(good_cert, ca_file):
    with Server("starttls", good_cert, "jürgen", auth_exclude_mechanism=["CRAM-MD5"]) as server:
        send_one(smtp.open_host(settings(server, "starttls", ca_file=ca_file,
                                         username="jürgen", password=PASSWORD)))  # fmt: skip
    assert server.logins.seen == [("PLAIN", "jürgen".encode(), True)]


def test_a_refused_login_names_the_user_the_host_and_the_reply(good_cert, ca_file):
    with Server("ssl", good_cert) as server, pytest.raises(smtp.HostError) as caught:
        smtp.open_host(settings(server, "ssl", ca_file=ca_file, username=USER, password="wrong"))
    assert caught.value.code == 535
    assert str(caught.value) == (
        f"127.0.0.1:{server.port} refused the login of ann: "
        "535 5.7.8 Authentication credentials invalid"
    )


def test_the_password_never_goes_over_plaintext_unless_allowed():
    with Server(None, auth_require_tls=False) as server:  # offers AUTH without TLS
        with pytest.raises(smtp.SettingsError) as caught:
            smtp.open_host(settings(server, None, username=USER, password=PASSWORD))
        assert str(caught.value) == (
            "refusing to send the SMTP password over an unencrypted connection to "
            f"127.0.0.1:{server.port}; set OUTBOX_MAIL_USE_TLS=true or "
            "OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH=true"
        )
        assert server.logins.seen == [] and server.recorder.connections == 0
        send_one(smtp.open_host(settings(server, None, username=USER, password=PASSWORD,
                                         allow_plaintext_auth=True)))  # fmt: skip
    assert server.logins.seen == [("CRAM-MD5", USER.encode(), False)]
    assert len(server.recorder.received) == 1


def test_plaintext_without_a_password_still_sends():
    with Server(None) as server:
        send_one(smtp.open_host(settings(server, None)))
    assert len(server.recorder.received) == 1


def test_starttls_set_but_not_offered_fails_and_sends_nothing():
    with Server(None, auth_require_tls=False) as server, pytest.raises(smtp.TlsError) as caught:
        smtp.open_host(settings(server, "starttls", username=USER, password=PASSWORD))
    assert str(caught.value) == (
        f"127.0.0.1:{server.port} does not offer STARTTLS, which OUTBOX_MAIL_USE_TLS "
        "requires; nothing was sent without it"
    )
    assert server.logins.seen == [] and server.recorder.received == []


def test_implicit_tls_to_a_plaintext_server_fails_clearly():
    with Server(None) as server, pytest.raises(smtp.TlsError, match=r"TLS with 127\.0\.0\.1"):
        smtp.open_host(settings(server, "ssl"))


def test_an_unreachable_host_is_named():
    port = free_port()
    with pytest.raises(smtp.HostError) as caught:
        smtp.open_host(smtp.HostSettings("127.0.0.1", port, timeout=5.0))
    assert str(caught.value) == f"cannot connect to 127.0.0.1:{port}: Connection refused"


def test_a_server_that_never_answers_is_named():
    with SilentServer() as silent, pytest.raises(smtp.HostError) as caught:
        smtp.open_host(smtp.HostSettings("127.0.0.1", silent.port, timeout=0.5))
    assert str(caught.value) == f"127.0.0.1:{silent.port} timed out: no answer within 0.5s"


def test_a_refusal_at_the_greeting_keeps_its_code():
    listener = socket.create_server(("127.0.0.1", 0))

    def greet() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"421 4.3.2 too busy, come back later\r\n")
            conn.recv(100)  # smtplib's QUIT, or its hanging up

    server = threading.Thread(target=greet)
    server.start()
    port = listener.getsockname()[1]
    try:
        with pytest.raises(smtp.HostError) as caught:
            smtp.open_host(smtp.HostSettings("127.0.0.1", port, timeout=5.0))
    finally:
        server.join()
        listener.close()
    assert caught.value.code == 421
    assert str(caught.value) == f"127.0.0.1:{port} answered 421 4.3.2 too busy, come back later"


# Settings


def test_the_tls_settings_are_typed_from_the_environment():
    environ = {"OUTBOX_MAIL_TLS_VERIFY": "false", "OUTBOX_MAIL_TLS_CA_FILE": "/etc/ca.pem",
               "OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH": "yes"}  # fmt: skip
    assert config.from_environ(environ) == {
        "MAIL_TLS_VERIFY": False, "MAIL_TLS_CA_FILE": "/etc/ca.pem",
        "MAIL_ALLOW_PLAINTEXT_AUTH": True,
    }  # fmt: skip
    defaults = config.DEFAULTS
    assert defaults["MAIL_TLS_VERIFY"] is True and defaults["MAIL_ALLOW_PLAINTEXT_AUTH"] is False
    assert defaults["MAIL_TLS_CA_FILE"] is None


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_ca_file_that_cannot_be_used_stops_the_app_at_start(tmp_path, content):
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=f"OUTBOX_MAIL_TLS_CA_FILE {path} cannot be used"):
        create_app(base_config(f"sqlite:///{tmp_path / 'db'}", MAIL_TLS_CA_FILE=str(path)))


def test_starttls_and_implicit_tls_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="set one"):
        create_app(base_config(f"sqlite:///{tmp_path / 'db'}", MAIL_USE_TLS=True,
                               MAIL_USE_SSL=True))  # fmt: skip


# Through the worker


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_certificate_defers_the_message_with_the_reason(app, make_message, mode):
    message = make_message()
    with Server(mode, self_signed()) as server:
        point_at(app, server, mode, MAIL_USERNAME=USER, MAIL_PASSWORD=PASSWORD)
        Worker().drain()
    row = fresh(message.id)
    assert row.status not in (Status.SENT, Status.FAILED)
    assert row.sent_at is None
    assert "TLS certificate of 127.0.0.1" in row.last_error
    assert "not trusted: self-signed certificate" in row.last_error
    assert server.recorder.received == [] and server.logins.seen == []


def test_a_password_refused_for_plaintext_defers_the_message(app, make_message):
    message = make_message()
    with Server(None, auth_require_tls=False) as server:
        point_at(app, server, None, MAIL_USERNAME=USER, MAIL_PASSWORD=PASSWORD)
        Worker().drain()
    row = fresh(message.id)
    assert row.status not in (Status.SENT, Status.FAILED)
    assert "over an unencrypted connection" in row.last_error
    assert server.recorder.connections == 0


def test_the_worker_sends_through_verified_tls_with_a_utf8_password(
    app, make_message, good_cert, ca_file
):
    message = make_message()
    with Server("starttls", good_cert) as server:
        point_at(app, server, "starttls", MAIL_USERNAME=USER, MAIL_PASSWORD=PASSWORD,
                 MAIL_TLS_CA_FILE=ca_file)  # fmt: skip
        Worker().drain()
    assert fresh(message.id).status == Status.SENT
    assert server.recorder.message_ids() == [message.message_id]
    assert server.logins.seen == [("CRAM-MD5", USER.encode(), True)]


UNSAFE = logging.WARNING, "outbox.smtp"


def test_send_queued_warns_once_for_each_opt_out(app, runner, make_message, caplog):
    make_message()
    with Server("ssl", self_signed(), auth_require_tls=False) as server:
        point_at(app, server, "ssl", MAIL_TLS_VERIFY=False, MAIL_ALLOW_PLAINTEXT_AUTH=True)
        result = runner.invoke(args=["send-queued"])
    assert result.exit_code == 0, result.output
    assert "sent 1" in result.output
    warned = [r.getMessage() for r in caplog.records if (r.levelno, r.name) == UNSAFE]
    assert len(warned) == 2
    assert warned[0].startswith("OUTBOX_MAIL_TLS_VERIFY is off: the TLS certificate and host")
    assert warned[1].startswith("OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH is on")


def test_no_warning_when_nothing_is_turned_off(app, runner, caplog):
    assert runner.invoke(args=["send-queued"]).exit_code == 0
    assert [r for r in caplog.records if (r.levelno, r.name) == UNSAFE] == []


@pytest.fixture
def tls_worker(app, tmp_path) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """Start `outbox worker` processes with extra OUTBOX_* settings; SIGTERM them at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(**settings: object) -> subprocess.Popen[str]:
        env = dict(
            os.environ,
            PYTHONPATH=str(Path(__file__).parents[2]),
            OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
            OUTBOX_INSTANCE_PATH=str(tmp_path),
            OUTBOX_SMTP_TIMEOUT="5",
            OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com",
            OUTBOX_POLL_INTERVAL="0.5",
        )
        env |= {f"OUTBOX_{k}": str(v) for k, v in settings.items()}  # fmt: skip
        worker = processes.start([sys.executable, "-m", "outbox", "worker"], env=env,
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
        started.append(worker)
        return worker

    yield start
    for worker in started:
        processes.kill_group(worker)


def test_a_worker_with_verify_off_warns_at_start_and_sends(tls_worker, make_message):
    message = make_message()
    with Server("ssl", self_signed()) as server:
        worker = tls_worker(MAIL_PORT=server.port, MAIL_USE_SSL="true", MAIL_TLS_VERIFY="false")
        deadline = time.monotonic() + processes.START_TIMEOUT
        while not server.recorder.received:
            assert time.monotonic() < deadline and worker.poll() is None, "nothing arrived"
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=30)
    assert worker.returncode == 0, log
    assert server.recorder.message_ids() == [message.message_id]
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, log
    assert "OUTBOX_MAIL_TLS_VERIFY is off" in warnings[0]
    assert f"127.0.0.1:{server.port}" in warnings[0]
    assert fresh(message.id).status == Status.SENT
