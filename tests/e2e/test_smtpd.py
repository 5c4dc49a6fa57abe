"""The submission server's protocol, with smtplib against the server running in the test.

AUTH, relay, envelope addresses and limits; each once, on SQLite. Mail queued for real
and sent on by a worker, on every database, is in test_smtpd_delivery.py.
"""

import base64
import contextlib
import logging
import smtplib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import func, select

from outbox.auth import tokens
from outbox.capabilities.submission.server import MAX_RECIPIENTS, address_problem, listening
from outbox.models import Message
from outbox.models.db import db
from tests.support.smtpd import free_port
from tests.support.smtpd_process import Certs, running

MAIL = b"From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\n\r\nHello\r\n"


@pytest.fixture
def port(app: Flask, certs: Certs) -> Iterator[int]:
    """The server on a free port, in this process, on the app's database, with STARTTLS."""
    app.config["MAX_MESSAGE_BYTES"] = 20_000
    found = free_port()
    controller = listening(app, "127.0.0.1", found, certs.server_context(), timeout=2)
    yield found
    controller.stop()


@pytest.fixture
def token(app: Flask) -> str:
    return tokens.create("app", scopes=("send",))


def tls_client(port: int, certs: Certs) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", port, timeout=10)
    client.starttls(context=certs.client_context())
    return client


def stored() -> int:
    count = db.session.scalar(select(func.count()).select_from(Message))
    db.session.commit()
    return count or 0


def plain(name: str, token: str) -> str:
    return base64.b64encode(f"\0{name}\0{token}".encode()).decode()


def test_ehlo_offers_size_8bitmime_smtputf8_pipelining_and_auth_only_after_starttls(port, certs):
    client = smtplib.SMTP("127.0.0.1", port, timeout=10)
    client.ehlo()
    assert client.esmtp_features["size"] == "20000"
    for feature in ("8bitmime", "smtputf8", "pipelining", "starttls"):
        assert feature in client.esmtp_features
    assert "auth" not in client.esmtp_features
    client.starttls(context=certs.client_context())  # checks the certificate and host
    client.ehlo()
    assert client.esmtp_features["auth"].split() == ["LOGIN", "PLAIN"]
    client.quit()


def test_auth_before_starttls_is_refused_even_with_a_good_token(port, token):
    client = smtplib.SMTP("127.0.0.1", port, timeout=10)
    client.ehlo()
    code, text = client.docmd("AUTH", f"PLAIN {plain('app', token)}")
    assert (code, text) == (538, b"5.7.11 Encryption required: STARTTLS before AUTH")
    assert client.docmd("MAIL FROM:<a@example.com>")[0] == 530
    client.quit()


@pytest.mark.parametrize("over_tls", [False, True])
def test_no_relay_without_auth(port, certs, over_tls):
    client = tls_client(port, certs) if over_tls else smtplib.SMTP("127.0.0.1", port, timeout=10)
    client.ehlo()
    code, text = client.docmd("MAIL FROM:<a@example.com>")
    assert code == 530 and text.startswith(b"5.7.0 Authentication required: AUTH PLAIN or LOGIN")
    assert client.docmd("RCPT TO:<b@example.com>")[0] == 530
    assert client.docmd("DATA")[0] == 530
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        client.sendmail("a@example.com", ["b@example.com"], MAIL)
    assert refused.value.smtp_code == 530
    client.quit()
    assert stored() == 0


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_a_token_with_the_send_scope_logs_in_with_plain_or_login(
    port, certs, token, mechanism, caplog
):
    caplog.set_level(logging.INFO, logger="outbox.smtpd")
    client = tls_client(port, certs)
    client.ehlo()
    client.user, client.password = "app", token
    method = client.auth_plain if mechanism == "PLAIN" else client.auth_login
    assert client.auth(mechanism, method) == (235, b"2.7.0 Authentication successful")
    assert client.docmd("MAIL FROM:<a@example.com>") == (250, b"2.1.0 OK")
    client.quit()
    peer = f"127.0.0.1:{client_port(caplog)}"
    logged = [r.getMessage() for r in caplog.records if r.name == "outbox.smtpd"]
    assert logged == [f"smtpd: connection from {peer}", f"smtpd: {peer} authenticated as 'app'"]


def client_port(caplog: pytest.LogCaptureFixture) -> str:
    first = next(r.getMessage() for r in caplog.records if "connection from" in r.getMessage())
    return first.rpartition(":")[2]


@pytest.mark.parametrize("case", ["wrong token", "another's name", "no send scope", "revoked"])
def test_a_token_that_may_not_send_is_refused(app, port, certs, token, case, caplog):
    name, password = "app", token
    if case == "wrong token":
        password = token[:-2] + "xx"
    elif case == "another's name":
        name = "other"
        tokens.create("other", scopes=("send",))
    elif case == "no send scope":
        name, password = "reader", tokens.create("reader", scopes=("read", "manage"))
    else:
        tokens.revoke("app")
    client = tls_client(port, certs)
    for mechanism in ("PLAIN", "LOGIN"):
        client.ehlo()
        client.user, client.password = name, password
        method = client.auth_plain if mechanism == "PLAIN" else client.auth_login
        with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
            client.auth(mechanism, method)
        expected = b"lacks the send scope" if case == "no send scope" else b"credentials invalid"
        assert refused.value.smtp_code == 535 and expected in refused.value.smtp_error
    assert client.docmd("MAIL FROM:<a@example.com>")[0] == 530
    client.quit()
    logged = [r.getMessage() for r in caplog.records if r.name == "outbox.smtpd"]
    assert any("AUTH refused from 127.0.0.1:" in line and repr(name) in line for line in logged)
    assert not any(password in line for line in logged)


@pytest.mark.parametrize(
    ("address", "smtputf8", "reply"),
    [
        ("ann@example.com", False, None),
        ("ann@xn--bcher-kva.example", False, None),
        ("ann@bücher.example", True, None),
        ("jörg@example.com", True, None),
        ("jörg@example.com", False, "553 5.6.7 'jörg@example.com' is not ASCII: give SMTPUTF8"),
        ("ann@bücher.example", False, "553 5.6.7 'ann@bücher.example' is not ASCII"),
        ("ann@", False, "553 5.1.3 'ann@' is not an email address"),
        ("ann@example.com,bob@example.com", False, "553 5.1.3 'ann@example.com,bob@example.com'"),
        ("ann@localhost", False, "553 5.1.3 'ann@localhost' is not an email address"),
        ("j\udcf6rg@example.com", True, "553 5.1.3 'j\\udcf6rg@example.com' is not an email "
                                        "address: not UTF-8"),
    ],
)  # fmt: skip
def test_envelope_addresses_are_checked_as_the_api_checks_them(address, smtputf8, reply):
    problem = address_problem(address, smtputf8, frozenset(), "5.1.3")
    if reply is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(reply)


def login(port: int, certs: Certs, token: str) -> smtplib.SMTP:
    client = tls_client(port, certs)
    client.login("app", token)
    return client


def test_a_malformed_address_is_refused_by_name_at_mail_and_rcpt(port, certs, token):
    client = login(port, certs, token)
    assert client.docmd("MAIL FROM:<ann@@example.com>") == (
        553,
        b"5.1.3 Malformed address: '<ann@@example.com>'; give it as <local@domain>",
    )
    assert client.docmd("MAIL FROM:<ann@-example.com>") == (
        553, b"5.1.7 'ann@-example.com' is not an email address: An email address cannot "
        b"have a hyphen immediately after the @-sign.")  # fmt: skip
    assert client.docmd("MAIL FROM:<a@example.com>")[0] == 250
    assert client.docmd("RCPT TO:<bob@exa@mple.com>") == (
        553,
        b"5.1.3 Malformed address: '<bob@exa@mple.com>'; give it as <local@domain>",
    )
    code, text = client.docmd("RCPT TO:<bob@-example.com>")
    assert code == 553 and b"'bob@-example.com' is not an email address" in text
    client.quit()


def test_a_non_ascii_address_needs_smtputf8(port, certs, token):
    client = login(port, certs, token)
    client.ehlo()
    client.command_encoding = "utf-8"
    code, text = client.docmd("MAIL FROM:<jörg@example.com>")
    assert code == 553 and text.startswith(b"5.6.7 ")
    assert client.docmd("MAIL FROM:<jörg@example.com> SMTPUTF8") == (250, b"2.1.0 OK")
    assert client.docmd("RCPT TO:<zoë@bücher.example>") == (250, b"2.1.5 OK")
    client.quit()


def test_past_the_recipient_limit_each_rcpt_gets_452(port, certs, token):
    client = login(port, certs, token)
    client.docmd("MAIL FROM:<a@example.com>")
    for n in range(MAX_RECIPIENTS):
        client.send(f"RCPT TO:<r{n}@example.com>\r\n".encode())  # pipelined
    assert all(client.getreply()[0] == 250 for _ in range(MAX_RECIPIENTS))
    code, text = client.docmd("RCPT TO:<one-more@example.com>")
    assert (code, text) == (452, b"4.5.3 Too many recipients: at most 1000 a mail")
    client.quit()


def test_over_size_is_552_at_mail_from_and_at_the_end_of_data(port, certs, token):
    client = login(port, certs, token)
    code, text = client.docmd("MAIL FROM:<a@example.com> SIZE=20001")
    assert (code, text) == (552, b"5.3.4 The mail is over 20000 bytes, the most this server takes")
    big = MAIL + b"x" * 990 + b"\r\n"
    client.mail("a@example.com")  # no SIZE given: the server finds out at the end
    client.rcpt("b@example.com")
    assert client.data(big * 20) == (552, text)
    assert client.noop()[0] == 250  # the connection goes on
    client.quit()
    assert stored() == 0


def test_a_whole_mail_on_one_line_is_taken_up_to_the_size_limit_and_command_lines_stay_short(
    port, certs, token
):
    client = login(port, certs, token)
    client.sendmail("a@example.com", ["b@example.com"], MAIL + b"y" * 19_000 + b"\r\n")
    assert stored() == 1
    raw = db.session.scalar(select(Message.raw_size))
    db.session.commit()
    assert raw is not None and raw > 19_000  # repaired (test_repair.py), stored
    client.mail("a@example.com")  # no SIZE given: one line past the limit, found at its end
    client.rcpt("b@example.com")
    too_big = b"5.3.4 The mail is over 20000 bytes, the most this server takes"
    assert client.data(MAIL + b"y" * 20_000 + b"\r\n") == (552, too_big)
    assert client.noop()[0] == 250  # the connection goes on, commands limited as before
    assert client.docmd("NOOP " + "n" * 1200) == (500, b"Command line too long")
    client.quit()
    assert stored() == 1


def test_a_nul_byte_is_refused_and_nothing_stored(port, certs, token):
    client = login(port, certs, token)
    with pytest.raises(smtplib.SMTPDataError) as refused:
        client.sendmail("a@example.com", ["b@example.com"], MAIL + b"a\0b\r\n")
    assert refused.value.smtp_code == 554 and b"NUL" in refused.value.smtp_error
    client.quit()
    assert stored() == 0


def test_an_idle_client_is_disconnected_after_the_timeout(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert sock.recv(100).startswith(b"220")
        started = time.monotonic()
        rest = b""
        while chunk := sock.recv(100):
            rest += chunk
        assert 1.5 < time.monotonic() - started < 8
    assert rest.startswith(b"421")


def test_queued_mail_is_answered_with_its_id(app, port, certs, token):
    client = login(port, certs, token)
    client.mail("a@example.com")
    client.rcpt("b@example.com")
    code, text = client.data(MAIL)
    client.quit()
    row = db.session.execute(select(Message.id, Message.source)).one()
    assert (code, text) == (250, f"2.0.0 queued as {row.id}".encode())
    assert row.source == "smtp:app"


def test_mails_of_connections_that_wait_are_committed_together_each_answered_its_id(
    app, certs, token
):
    """While the committer stores one connection's mail, three others' wait; then those
    three go in one transaction, and each client is answered the id of its own mail."""
    found = free_port()
    controller = listening(app, "127.0.0.1", found, certs.server_context(), timeout=10)
    committer = controller.handler.committer
    store, entered, release = committer.store_many, threading.Event(), threading.Event()
    groups: list[list[str]] = []

    def held_first(mails):  # type: ignore[no-untyped-def]
        groups.append([mail.recipients[0] for mail in mails])
        if len(groups) == 1:
            entered.set()
            release.wait(30)
        return store(mails)

    committer.store_many = held_first
    answers: dict[int, tuple[int, bytes]] = {}

    def send(n: int) -> None:
        client = login(found, certs, token)
        client.mail("a@example.com")
        client.rcpt(f"c{n}@example.com")
        answers[n] = client.data(MAIL.replace(b"Subject: hi", f"Subject: {n}".encode()))
        client.quit()

    try:
        senders = [threading.Thread(target=send, args=(n,)) for n in range(4)]
        senders[0].start()
        assert entered.wait(30)
        for sender in senders[1:]:
            sender.start()
        with committer.ready:
            assert committer.ready.wait_for(lambda: len(committer.waiting) == 3, timeout=30)
        release.set()
        for sender in senders:
            sender.join(30)
    finally:
        release.set()
        controller.stop()
    assert groups[0] == ["c0@example.com"]
    assert sorted(groups[1]) == ["c1@example.com", "c2@example.com", "c3@example.com"]
    assert len(groups) == 2
    rows = {subject: pk for subject, pk in db.session.execute(select(Message.subject, Message.id))}
    assert answers == {n: (250, f"2.0.0 queued as {rows[str(n)]}".encode()) for n in range(4)}


def test_smtpd_refuses_to_start_without_tls_or_the_plaintext_setting(app, tmp_path: Path):
    from outbox.cli.smtpd import smtpd_command

    result = app.test_cli_runner().invoke(smtpd_command, ["--listen", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "set OUTBOX_SMTPD_TLS_CERT and OUTBOX_SMTPD_TLS_KEY" in result.output
    app.config["SMTPD_TLS_CERT"] = str(tmp_path / "missing.pem")
    result = app.test_cli_runner().invoke(smtpd_command, ["--listen", "127.0.0.1:1"])
    assert result.exit_code == 2 and "set both OUTBOX_SMTPD_TLS_CERT and" in result.output
    app.config["SMTPD_TLS_KEY"] = str(tmp_path / "missing-key.pem")
    result = app.test_cli_runner().invoke(smtpd_command, ["--listen", "127.0.0.1:1"])
    assert result.exit_code == 2 and "cannot load the STARTTLS certificate" in result.output


def test_the_systemd_unit_runs_smtpd_on_the_submission_port_with_only_that_capability():
    from tests.support.deploy import unit

    service = unit("outbox-smtpd.service")["Service"]
    assert service["ExecStart"] == "/opt/outbox/venv/bin/outbox smtpd --listen 0.0.0.0:587"
    assert service["AmbientCapabilities"] == service["CapabilityBoundingSet"]
    assert service["CapabilityBoundingSet"] == "CAP_NET_BIND_SERVICE"


def test_header_injection_is_refused_naming_the_line(port, certs, token):
    client = login(port, certs, token)
    injected = b"From: a@example.com\r\nSubject: hi\r\nBcc everyone@example.com\r\n\r\nHello\r\n"
    with pytest.raises(smtplib.SMTPDataError) as refused:
        client.sendmail("a@example.com", ["b@example.com"], injected)
    assert refused.value.smtp_code == 554
    assert refused.value.smtp_error.startswith(b"5.6.0 header line 3 is not a field")
    client.quit()
    assert stored() == 0


def test_implicit_tls_on_a_port_of_its_own_takes_mail_and_a_plaintext_client_gets_nothing(
    app, certs, token, tmp_path
):
    """`outbox smtpd --listen-tls` (RFC 8314, port 465): TLS from the first byte with the
    STARTTLS certificate, checked by the client; AUTH at once, no STARTTLS offered."""
    with running(app.config["DATABASE_URL"], tmp_path, certs, listen_tls=True) as smtpd:
        assert smtpd.tls_port is not None
        client = smtplib.SMTP_SSL("127.0.0.1", smtpd.tls_port, timeout=30,
                                  context=certs.client_context())  # fmt: skip
        client.ehlo()
        assert not client.has_extn("starttls") and "PLAIN" in client.esmtp_features["auth"]
        client.login("app", token)
        refused = client.sendmail("a@example.com", ["b@example.com"], MAIL)
        client.quit()
        assert refused == {} and stored() == 1
        # A client that does not speak TLS first is never greeted.
        with socket.create_connection(("127.0.0.1", smtpd.tls_port), timeout=5) as sock:
            sock.settimeout(2)
            with contextlib.suppress(TimeoutError, ConnectionError):
                assert not sock.recv(100).startswith(b"220")
    # Without a certificate there is no TLS to listen with.
    from outbox.cli.smtpd import smtpd_command

    app.config["SMTPD_ALLOW_PLAINTEXT_AUTH"] = True
    listen = ["--listen", "127.0.0.1:1", "--listen-tls", "127.0.0.1:2"]
    cli = app.test_cli_runner().invoke(smtpd_command, listen)
    assert cli.exit_code == 2 and "--listen-tls needs OUTBOX_SMTPD_TLS_CERT" in cli.output
