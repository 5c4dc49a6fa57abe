"""`outbox check`: each check against a real SMTP server and database, with its hint on failure."""

import os
import socket
import subprocess
import sys

import pytest
from flask_migrate import downgrade, upgrade

from outbox.models.db import db, dispose_engines
from tests.support.checks import check, line, revisions
from tests.support.smtpd import free_port
from tests.support.tlscerts import PASSWORD, USER, Server, point_at


@pytest.mark.all_databases
def test_all_pass_against_a_plain_server_and_nothing_is_sent(smtp_app, smtp, runner):
    code, output = check(runner)
    assert code == 0, output
    assert line(output, "settings").startswith("ok    settings  valid")
    assert line(output, "database").startswith("ok    database")
    head, _ = revisions(smtp_app)
    assert line(output, "schema") == f"ok    schema    at the latest migration, {head}"
    assert line(output, "smtp") == (
        f"ok    smtp      127.0.0.1:{smtp.port}: EHLO answered, no TLS, no AUTH; nothing was sent"
    )
    assert output.splitlines()[-1] == "all 4 checks passed"
    assert smtp.received == []


def test_an_untrusted_certificate_fails_with_a_hint_about_the_ca_file(app, runner, good_cert):
    with Server("starttls", good_cert) as server:
        point_at(app, server, "starttls")
        code, output = check(runner)
    assert code == 1
    found = line(output, "smtp")
    assert found.startswith(
        f"FAIL  smtp      TLS certificate of 127.0.0.1:{server.port} not trusted"
    )
    assert (
        "fix: if the server's certificate comes from a private CA, set OUTBOX_MAIL_TLS_CA_FILE"
        in found
    )
    assert output.splitlines()[-1] == "1 of 4 checks failed: smtp"
    assert server.logins.seen == []  # the password never went


def test_starttls_with_the_ca_file_and_a_login_passes(app, runner, good_cert, ca_file):
    with Server("starttls", good_cert) as server:
        point_at(app, server, "starttls", MAIL_TLS_CA_FILE=ca_file, MAIL_USERNAME=USER,
                 MAIL_PASSWORD=PASSWORD)  # fmt: skip
        code, output = check(runner)
    assert code == 0, output
    assert line(output, "smtp") == (f"ok    smtp      127.0.0.1:{server.port}: EHLO answered, "
                                    f"STARTTLS (certificate checked), logged in as {USER}; "
                                    "nothing was sent")  # fmt: skip
    assert [(user, tls) for _, user, tls in server.logins.seen] == [(USER.encode(), True)]
    assert server.recorder.received == []


def test_a_refused_login_fails_with_a_hint_about_the_credentials(app, runner, good_cert, ca_file):
    with Server("starttls", good_cert) as server:
        point_at(app, server, "starttls", MAIL_TLS_CA_FILE=ca_file, MAIL_USERNAME=USER,
                 MAIL_PASSWORD="wrong")  # fmt: skip
        code, output = check(runner)
    assert code == 1
    found = line(output, "smtp")
    assert f"refused the login of {USER}: 535" in found
    assert "fix: check OUTBOX_MAIL_USERNAME and OUTBOX_MAIL_PASSWORD" in found


def test_a_dead_port_fails_with_a_hint_about_server_and_port(app, runner):
    point_at_port = free_port()
    app.config["MAIL_PORT"] = point_at_port
    app.extensions["mail"].port = point_at_port
    code, output = check(runner)
    assert code == 1
    found = line(output, "smtp")
    assert f"cannot connect to 127.0.0.1:{point_at_port}" in found
    assert "fix: check OUTBOX_MAIL_SERVER and OUTBOX_MAIL_PORT" in found


@pytest.mark.all_databases
def test_a_schema_behind_fails_with_the_upgrade_hint(smtp_app, smtp, runner):
    db.session.remove()
    dispose_engines()
    downgrade(revision="-1")
    try:
        code, output = check(runner)
    finally:
        upgrade()
    assert code == 1
    head, before = revisions(smtp_app)
    assert line(output, "schema") == (
        f"FAIL  schema    at {before}, the latest is {head}\n"
        "                fix: run `outbox db upgrade` (safe on a live queue; back up first)"
    )
    assert output.splitlines()[-1] == "1 of 4 checks failed: schema"


def test_an_unreachable_database_fails_from_the_shell(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, OUTBOX_DATABASE_URL=f"mysql+pymysql://root:secret@127.0.0.1:{port}/x",
               OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_MAIL_PORT=str(free_port()))  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "outbox", "check"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    found = line(done.stdout, "database")
    assert found.startswith(f"FAIL  database  mysql+pymysql://root:***@127.0.0.1:{port}/x: ")
    assert "Can't connect" in found and "fix: check OUTBOX_DATABASE_URL" in found
    assert "schema" not in done.stdout  # not checked without a database
    assert done.stdout.splitlines()[-1] == "2 of 3 checks failed: database, smtp"


def test_settings_the_app_refuses_are_a_failed_check_from_the_shell(tmp_path):
    env = dict(os.environ, OUTBOX_LOG_FORMAT="bogus", OUTBOX_INSTANCE_PATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "outbox", "check"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "FAIL  settings  LOG_FORMAT (OUTBOX_LOG_FORMAT) must be one of text, json, not 'bogus'",
        "                fix: change the OUTBOX_* setting it names",
        "1 of 1 checks failed: settings",
    ]
