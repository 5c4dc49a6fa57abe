"""The demo: the web app, a worker and a catch-all SMTP server, all on this machine."""

import itertools
import logging
import os
import secrets
import time
from pathlib import Path

import click
from aiosmtpd.controller import Controller
from apscheduler.schedulers.background import BackgroundScheduler
from flask_migrate import upgrade
from werkzeug.serving import run_simple

from . import accounts, runner, tokens, worker
from .app import create_app
from .cli import configure_logging

log = logging.getLogger("outbox.demo")
DEMO_SENDER = "outbox@demo.example"
DEMO_USER = "staff@demo.example"


class EmlSink:
    """aiosmtpd handler that accepts everything and keeps each mail as an .eml file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.counter = itertools.count(1)
        folder.mkdir(parents=True, exist_ok=True)

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.folder / f"{stamp}-{os.getpid()}-{next(self.counter):05d}.eml"
        path.write_bytes(envelope.content)
        log.info("demo SMTP server kept mail for %s as %s", ", ".join(envelope.rcpt_tos), path)
        return "250 OK kept"


def _fresh_token() -> str:
    """A new 'demo' token, replacing the one an earlier demo printed."""
    tokens.revoke("demo")
    return tokens.create("demo")


def _fresh_user() -> str:
    """The demo's staff account, with a new password each start."""
    password = secrets.token_urlsafe(9)
    if accounts.find(DEMO_USER) is None:
        accounts.create_user(DEMO_USER, password)
    else:
        accounts.set_password(DEMO_USER, password)
    return password


@click.command("demo")
@click.option("--port", default=5000, show_default=True, help="Web port on 127.0.0.1.")
@click.option("--smtp-port", default=8025, show_default=True, help="Port of the demo SMTP server.")
def command(port: int, smtp_port: int) -> None:
    """Run everything on this machine: web app, worker and a catch-all SMTP server."""
    configure_logging()
    run(port, smtp_port)


def run(port: int, smtp_port: int) -> None:
    """Start everything and serve until Ctrl-C."""
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
    app = create_app(overrides)
    app.config["MAIL_DEFAULT_SENDER"] = app.config["MAIL_DEFAULT_SENDER"] or DEMO_SENDER
    app.extensions["mail"].default_sender = app.config["MAIL_DEFAULT_SENDER"]
    with app.app_context():
        upgrade()
        token = _fresh_token()
        password = _fresh_user()

    folder = Path(app.instance_path) / "mail"
    sink = Controller(EmlSink(folder), hostname="127.0.0.1", port=smtp_port)
    sink.start()
    scheduler = BackgroundScheduler(timezone="UTC")
    drainer = worker.Worker()
    runner.schedule(scheduler, app, drainer)
    scheduler.start()

    base = f"http://127.0.0.1:{port}"
    click.echo(
        f"""
outbox demo
  web app      {base}
  database     {app.config["DATABASE_URL"]}
  SMTP server  127.0.0.1:{smtp_port}, mail kept in {folder}
  worker       polls every {app.config["POLL_INTERVAL"]:g}s
  sign in as   {DEMO_USER} / {password}
  API token    {token}

Queue a message:
  curl -s -H 'Authorization: Bearer {token}' \\
       -d to=someone@example.com -d subject=Hello -d text='Sent through outbox' \\
       {base}/api/messages
"""
    )
    try:
        # Werkzeug's server directly: Flask's app.run() refuses to start under its own CLI.
        run_simple("127.0.0.1", port, app, threaded=True)
    finally:
        drainer.stop.set()
        scheduler.shutdown(wait=True)
        sink.stop()
