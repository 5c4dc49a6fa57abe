"""Real clients that send long lines or bare LFs to a real `outbox smtpd`: the mail is taken,
repaired (outbox.capabilities.submission.repair) and sent on by a worker with every line within 998
octets, decoding to exactly what the client sent, and DKIM-signed over the repaired bytes.

msmtp as PHP's mail() runs it (`msmtp -t`), also with a Subject, a name and a file name
typed in UTF-8 and sent on to a server offering no SMTPUTF8; curl uploading a file with LF line ends
(no --crlf), swaks with a long Subject and body line, and Flask-Mail with the docs'
settings and an HTML body on one line; and swaks refused, naming the header it cannot fold.
"""

import subprocess
from email import message_from_bytes
from email.message import Message
from email.policy import compat32, default

import flask_mail
import pytest
from flask import Flask
from flask.testing import FlaskCliRunner

from outbox.mail.rendered import Features
from outbox.worker import Tally, Worker
from tests.support.dkimkeys import published, verifies
from tests.support.mailcheck import long_lines
from tests.support.smtpd import SmtpServer
from tests.support.smtpd_process import Certs
from tests.support.wire import aiosmtpd_server

HTML = ("<html><body><table><tr><td>Grüße</td>" + "<td>item</td>" * 420
        + "</tr></table></body></html>").encode()  # fmt: skip  # 5,101 octets, one line
WORDS = " ".join(f"word{n}" for n in range(250))  # 1,739 characters: a Subject to fold


@pytest.fixture
def records(runner: FlaskCliRunner) -> dict[bytes, bytes]:
    """A DKIM key for example.com, as its TXT record would be published."""
    made = runner.invoke(args=["dkim", "add", "example.com", "--selector", "s1"])
    assert made.exit_code == 0, made.output
    return published(made.output)


def sent_on(smtp: SmtpServer, records: dict[bytes, bytes]) -> Message:
    """The one mail queued, sent by a worker: short lines, DKIM verified; as a reader parses it."""
    assert Worker().drain() == Tally(sent=1)
    [got] = smtp.received
    assert long_lines(got.content) == []
    assert verifies(got.content, records)
    return message_from_bytes(got.content, policy=compat32)


def decoded(part: Message) -> bytes:
    found = part.get_payload(decode=True)
    assert isinstance(found, bytes)
    return found


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(command, capture_output=True, timeout=60, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def msmtp_config(tmp_path, port: int, token: str, certs: Certs):  # type: ignore[no-untyped-def]
    """msmtp's settings for outbox smtpd on port: STARTTLS, AUTH PLAIN with the token."""
    config = tmp_path / "msmtprc"
    config.write_text(
        f"account default\nhost 127.0.0.1\nport {port}\nfrom shop@example.com\n"
        f"auth plain\nuser shop\npassword {token}\ntls on\ntls_starttls on\n"
        f"tls_trust_file {certs.ca_file}\n"
    )
    config.chmod(0o600)  # msmtp refuses a password file others can read
    return config


def test_php_mail_through_msmtp_with_a_5000_octet_html_line(
    smtp_app, smtp, port, certs, token, records, tmp_path
):
    config = msmtp_config(tmp_path, port, token, certs)
    # What PHP's mail() pipes to sendmail_path = "msmtp -t": LF line ends.
    head = (b"To: ann@example.com\nSubject: Your order\nFrom: shop@example.com\n"
            b"MIME-Version: 1.0\nContent-Type: text/html; charset=UTF-8\n\n")  # fmt: skip
    mail = head + HTML + b"\n"
    done = run(["msmtp", "-C", str(config), "-t"], input=mail)
    assert done.returncode == 0, done.stderr
    got = sent_on(smtp, records)
    assert (got["Subject"], got.get_content_type(), got.get_content_charset()) == (
        "Your order", "text/html", "utf-8")  # fmt: skip
    assert decoded(got) == HTML + b"\r\n"


def test_php_mail_typed_in_utf8_reaches_a_server_without_smtputf8_downgraded(
    app, port, certs, token, records, tmp_path
):
    # PHP's mail() with nothing encoded: the Subject, the name and the file name as typed.
    mail = ("To: Jörg Müller <joerg@example.com>\nSubject: Ihre Bestellung – Grüße aus Köln\n"
            "From: Bücherladen <shop@example.com>\nMIME-Version: 1.0\n"
            'Content-Type: text/plain; charset=UTF-8; name="Rechnung März.txt"\n'
            'Content-Disposition: inline; filename="Rechnung März.txt"\n'
            "Content-Transfer-Encoding: 8bit\n\nIhre Rechnung über 12 €.\n").encode()  # fmt: skip
    done = run(["msmtp", "-C", str(msmtp_config(tmp_path, port, token, certs)), "-t"], input=mail)
    assert done.returncode == 0, done.stderr
    with aiosmtpd_server(Features(eight_bit=False, smtputf8=False)) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        assert Worker().drain() == Tally(sent=1)
        [got] = server.received()
    assert got.content.isascii() and got.rcpt_tos == ["joerg@example.com"]
    assert long_lines(got.content) == []
    assert verifies(got.content, records)  # signed over what this server got
    read = message_from_bytes(got.content, policy=default)
    assert read["Subject"] == "Ihre Bestellung – Grüße aus Köln"
    assert (read["From"].addresses[0].display_name, read["To"].addresses[0].display_name) == (
        "Bücherladen", "Jörg Müller")  # fmt: skip
    assert read.get_filename() == "Rechnung März.txt"
    assert read.get_content() == "Ihre Rechnung über 12 €.\r\n"


def test_curl_uploading_a_file_with_lf_line_ends_and_a_long_line(
    smtp_app, smtp, port, certs, token, records, tmp_path
):
    body = b"Hello,\n\n" + b"long " * 300 + b"\n.a dot\n\nBye\n"
    upload = tmp_path / "mail.eml"
    upload.write_bytes(b"From: shop@example.com\nTo: ann@example.com\nSubject: LF only\n\n" + body)
    done = run(["curl", "-sS", "--ssl-reqd", "--cacert", str(certs.ca_file),
                f"smtp://127.0.0.1:{port}", "--mail-from", "shop@example.com",
                "--mail-rcpt", "ann@example.com", "--user", f"shop:{token}",
                "--upload-file", str(upload)])  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = sent_on(smtp, records)
    assert got["Subject"] == "LF only"
    assert decoded(got) == body.replace(b"\n", b"\r\n")  # no empty line added at the end


def swaks(port: int, certs: Certs, token: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run(["swaks", "--server", f"127.0.0.1:{port}", "--tls", "--tls-verify",
                "--tls-ca-path", str(certs.ca_file), "--auth", "PLAIN", "--auth-user", "shop",
                "--auth-password", token, "--from", "shop@example.com",
                "--to", "ann@example.com", *args])  # fmt: skip


def test_swaks_with_a_long_subject_and_a_long_body_line(
    smtp_app, smtp, port, certs, token, records
):
    line = "x" * 1500
    done = swaks(port, certs, token, "--header", f"Subject: {WORDS}", "--body", line)
    assert done.returncode == 0, done.stdout + done.stderr
    got = sent_on(smtp, records)
    assert got["Subject"].replace("\r\n", "") == WORDS  # folded, and unfolded as it was
    assert decoded(got) == line.encode() + b"\r\n" * 3  # swaks ends a body with 2 empty lines


def test_flask_mail_with_the_readme_settings_and_an_html_body_on_one_line(
    smtp_app, smtp, port, token, records
):
    shop = Flask("shop")
    shop.config.update(MAIL_SERVER="127.0.0.1", MAIL_PORT=port, MAIL_USE_TLS=True,
                       MAIL_USERNAME="shop", MAIL_PASSWORD=token,
                       MAIL_DEFAULT_SENDER="Shop <shop@example.com>")  # fmt: skip
    html = HTML.decode()
    message = flask_mail.Message("Your order", recipients=["ann@example.com"],
                                 body="Grüße\nfrom the shop\n", html=html)  # fmt: skip
    with shop.app_context():
        flask_mail.Mail(shop).send(message)
    got = sent_on(smtp, records)
    plain, rich = [part for part in got.walk() if not part.is_multipart()]
    assert decoded(plain).decode() == "Grüße\r\nfrom the shop\r\n"  # smtplib sends CRLF
    assert (rich.get_content_type(), decoded(rich).decode()) == ("text/html", html)


def test_a_header_with_no_space_to_fold_at_is_refused_naming_it(smtp_app, smtp, port, certs, token):
    done = swaks(port, certs, token, "--header", f"X-Token: {'t' * 1200}", "--body", "hi")
    assert done.returncode != 0
    assert (b" 554 5.6.0 the X-Token field cannot be folded: it holds 1200 octets without "
            b"a space, over the 998 a line may have (RFC 5322 2.1.1)") in done.stdout  # fmt: skip
    assert Worker().drain() == Tally() and smtp.received == []
