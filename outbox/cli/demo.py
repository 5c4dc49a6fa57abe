"""`outbox demo`: the web app, a worker and a catch-all SMTP server, all on this machine, in
capture mode: mail to the demo's own domain reaches its SMTP server, the rest is captured."""

import errno
import itertools
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from aiosmtpd.controller import Controller
from apscheduler.schedulers.background import BackgroundScheduler
from flask import Flask
from flask.cli import ScriptInfo
from werkzeug.serving import run_simple

from outbox import worker
from outbox.auth import accounts, tokens
from outbox.capabilities.bounces import store as bounces
from outbox.cli import demo_dns
from outbox.core import logs
from outbox.worker import runner

log = logging.getLogger("outbox.demo")
DEMO_SENDER = "outbox@demo.example"
DEMO_USER = "staff@demo.example"
HOST = "127.0.0.1"  # everything listens here only, so every visitor comes from here
# Capture mode's allowlist: the demo's own domain goes to its SMTP server, whose answers
# to these addresses show the other states; mail to any other address is captured.
DEMO_DOMAIN = "demo.example"
ANSWERS = {
    f"defer@{DEMO_DOMAIN}": "451 4.2.0 demo: mailbox busy, try again later",
    f"fail@{DEMO_DOMAIN}": "550 5.1.1 demo: no such user here",
}
# Taken, then returned: the server sends a delivery status notification (RFC 3464) back to
# outbox's bounce intake, as a mail server that finds a mailbox gone after the fact does.
BOUNCES = f"bounce@{DEMO_DOMAIN}"


def returned(content: bytes, recipient: str) -> bytes:
    """The bounce of a mail taken for recipient: the status report and the mail's headers."""
    headers = content.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].decode("ascii", "replace")
    boundary = f"demo-bounce-{secrets.token_hex(8)}"
    return f"""\
From: Mail Delivery System <mailer-daemon@{DEMO_DOMAIN}>
To: {DEMO_SENDER}
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"

--{boundary}
Content-Type: text/plain; charset=us-ascii

The demo's server could not deliver your mail to {recipient}.

--{boundary}
Content-Type: message/delivery-status

Reporting-MTA: dns; {DEMO_DOMAIN}

Final-Recipient: rfc822; {recipient}
Action: failed
Status: 5.1.1
Diagnostic-Code: smtp; 550 5.1.1 demo: this mailbox is gone

--{boundary}
Content-Type: text/rfc822-headers

{headers}

--{boundary}--
""".replace("\n", "\r\n").encode("ascii", "replace")


class EmlSink:
    """aiosmtpd handler that keeps each mail as an .eml file; ANSWERS' addresses it refuses,
    and a mail to BOUNCES it takes, then returns to app's bounce intake."""

    def __init__(self, folder: Path, app: Flask | None = None):
        self.folder = folder
        self.app = app
        self.counter = itertools.count(1)
        folder.mkdir(parents=True, exist_ok=True)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # type: ignore[no-untyped-def]  # noqa: N802
        answer = ANSWERS.get(address.lower())
        if answer:
            return answer
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.folder / f"{stamp}-{os.getpid()}-{next(self.counter):05d}.eml"
        path.write_bytes(envelope.content)
        log.info("demo SMTP server kept mail for %s as %s", ", ".join(envelope.rcpt_tos), path)
        if self.app is not None and BOUNCES in (rcpt.lower() for rcpt in envelope.rcpt_tos):
            # After the reply, as a real server's bounce comes: outbox has the mail sent.
            bounce = returned(envelope.content, BOUNCES)
            threading.Thread(target=self._return, args=(bounce,), name="demo-bounce").start()
        return "250 OK kept"

    def _return(self, bounce: bytes) -> None:
        assert self.app is not None
        with self.app.app_context():
            bounces.take_in(bounce, via="demo", envelope_to=[DEMO_SENDER])


def _delivery(config: Any) -> str:
    """What the demo does with mail, in a line of its banner."""
    if config["DELIVERY"] != "allowlist" or config["DELIVERY_ALLOW"] != {f"@{DEMO_DOMAIN}"}:
        return f"OUTBOX_DELIVERY={config['DELIVERY']}"
    return (f"captured (the Captured page), but @{DEMO_DOMAIN}: to its SMTP server, where "
            f"defer@ and fail@ are refused and bounce@ comes back")  # fmt: skip


def _zone(server: demo_dns.Server | None) -> str:
    """What the demo's DNS server serves, in the rest of a line of its banner."""
    return f", the records of {DEMO_DOMAIN} (the Domains page)" if server else ""


def _fresh_token() -> str:
    """A new 'demo' token, replacing the one an earlier demo printed."""
    tokens.revoke("demo")
    return tokens.create("demo")


def _fresh_user() -> str:
    """The demo's staff account, with a new password each start and no lockout in its way.

    A sign-in tried with the last run's password, five times, would otherwise keep the
    new one out for 15 minutes: every visitor of the demo comes from HOST.
    """
    password = secrets.token_urlsafe(9)
    if accounts.find(DEMO_USER) is None:
        accounts.create_user(DEMO_USER, password)
    else:
        accounts.set_password(DEMO_USER, password)
    accounts.unlock_address(HOST)
    return password


def _unusable(port: int) -> str | None:
    """Why HOST:port cannot be listened on, if it cannot (a port left in TIME_WAIT can)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as both servers do
        try:
            probe.bind((HOST, port))
        except OverflowError:
            return "is not a port number"
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "is taken by another program (another demo?)"
            if exc.errno == errno.EACCES:
                return "needs privileges this user lacks"
            raise
    return None


def check_ports(port: int, smtp_port: int) -> None:
    """Refuse to start, saying how to pick another, if a port is unusable or both are one."""
    if port == smtp_port:
        raise click.ClickException(f"the web app and the SMTP server cannot share port {port}")
    problems = []
    for number, what, variable, option in ((port, "web app", "PORT", "--port"),
                                           (smtp_port, "SMTP server", "SMTP_PORT",
                                            "--smtp-port")):  # fmt: skip
        why = _unusable(number)
        if why:
            other = number + 1 if 1024 <= number < 65535 else 1024
            while other in (port, smtp_port) or _unusable(other):
                other += 1
            problems.append(
                f"port {number} on {HOST}, for the demo's {what}, {why}. Pick another: "
                f"make run {variable}={other}, or outbox demo {option} {other}"
            )
    if problems:
        raise click.ClickException("\n".join(problems))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the server's loop ends on it, and everything is stopped


@click.command("demo")
@click.option("--port", default=5000, show_default=True, help="Web port on 127.0.0.1.")
@click.option("--smtp-port", default=8025, show_default=True, help="Port of the demo SMTP server.")
@click.pass_obj
def command(info: ScriptInfo, port: int, smtp_port: int) -> None:
    """Run everything on this machine: web app, worker and a catch-all SMTP server.

    The `make run` demo (make run PORT=5001 SMTP_PORT=8026). A port already taken stops
    it before anything is printed, naming the port and a free one to use instead. Each
    start prints a new password for staff@demo.example and lifts any lockout of
    127.0.0.1; SIGINT (Ctrl-C) or SIGTERM stops it.
    """
    assert info.create_app is not None  # the `outbox` group's factory, outbox.app.create_app
    run(info.create_app, port, smtp_port)


def run(create_app: Callable[[dict[str, Any]], Flask], port: int, smtp_port: int) -> None:
    """Start everything on the app create_app makes with the demo's settings; serve until
    Ctrl-C (SIGINT) or SIGTERM."""
    overrides = {
        "MAIL_SERVER": "127.0.0.1",
        "MAIL_PORT": smtp_port,
        "MAIL_USE_TLS": False,
        "MAIL_USE_SSL": False,
        "MAIL_USERNAME": None,
        "MAIL_PASSWORD": None,
    }
    if "OUTBOX_POLL_INTERVAL" not in os.environ:
        overrides["POLL_INTERVAL"] = 5.0  # quicker than production, to watch mail move
    if "OUTBOX_DELIVERY" not in os.environ:  # nothing a newcomer types leaves this machine
        overrides["DELIVERY"] = "allowlist"
        overrides["DELIVERY_ALLOW"] = frozenset({f"@{DEMO_DOMAIN}"})
    dns_server = None
    if "OUTBOX_DNS_RESOLVERS" not in os.environ:  # the Domains page asks the demo's own
        dns_server = demo_dns.Server(HOST).start()
        overrides["DNS_RESOLVERS"] = dns_server.address
    app = create_app(overrides)
    logs.setup(app.config["LOG_FORMAT"])
    # The pages poll while open: a line for each request would bury everything else;
    # and the schema's steps, made anew on a first start, are no news in a demo.
    for chatty in ("werkzeug", "alembic"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    check_ports(port, smtp_port)  # before the account gets a password nobody would see
    app.config["MAIL_DEFAULT_SENDER"] = app.config["MAIL_DEFAULT_SENDER"] or DEMO_SENDER
    app.extensions["mail"].default_sender = app.config["MAIL_DEFAULT_SENDER"]
    from flask_migrate import upgrade  # Alembic: only the demo and `outbox db` migrate

    with app.app_context():
        upgrade()
        token = _fresh_token()
        password = _fresh_user()

    folder = Path(app.instance_path) / "mail"
    sink = Controller(EmlSink(folder, app), hostname=HOST, port=smtp_port)
    sink.start()
    scheduler = BackgroundScheduler(timezone="UTC")
    drainer = worker.Worker()
    runner.schedule(scheduler, app, drainer)
    scheduler.start()

    base = f"http://{HOST}:{port}"
    click.echo(
        f"""
outbox demo
  web app      {base}
  database     {app.config["DATABASE_URL"]}
  SMTP server  {HOST}:{smtp_port}, mail kept in {folder}
  delivery     {_delivery(app.config)}
  DNS          {app.config["DNS_RESOLVERS"] or "the system's"}{_zone(dns_server)}
  worker       polls every {app.config["POLL_INTERVAL"]:g}s
  sign in as   {DEMO_USER} / {password}
  API token    {token}

Queue a message (captured; to=defer@, fail@ or bounce@{DEMO_DOMAIN} for the other states):
  curl -s -H 'Authorization: Bearer {token}' \\
       -d to=someone@example.com -d subject=Hello -d text='Sent through outbox' \\
       {base}/api/messages
"""
    )
    # Set here, not inherited: started in the background of a script, the demo would
    # find SIGINT ignored, and SIGTERM would end it without stopping the worker first.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        # Werkzeug's server directly: Flask's app.run() refuses to start under its own CLI.
        run_simple(HOST, port, app, threaded=True)
    finally:
        drainer.stop.set()
        scheduler.shutdown(wait=True)
        sink.stop()
        if dns_server is not None:
            dns_server.stop()
