"""`outbox bounces --listen`: the SMTP server a relay forwards bounce mails to (aiosmtpd).

It takes mail only for BOUNCE_ADDRESS and its VERP forms (550 5.1.1 to any other
recipient), at most BOUNCE_MAX_BYTES, from a client within its connections and its
budget of mails and bytes a minute (outbox.admission: 421 4.7.0 past them), and
answers 250 only once the raw mail is stored:
a database that is down gets 451, and the relay keeps the mail and tries again. Reading
the mail comes after the answer's storing; if it fails, the mail stays in the inbox.
"""

import asyncio
import logging
import signal
import threading
import time

import click
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from flask import Flask, current_app

from outbox.capabilities.bounces import store, verp
from outbox.smtp import admission

log = logging.getLogger("outbox.bounces")


class Handler:
    """aiosmtpd handler: RCPT checked against the bounce address, DATA stored, then read."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.address = str(app.config["BOUNCE_ADDRESS"])
        self.secret = app.secret_key or ""
        self.admission = admission.Admission(admission.bounce_limits(app.config))

    async def handle_MAIL(  # noqa: N802 (aiosmtpd's hook names)
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        spent = self.admission.may_send(admission.client_of(session.peer), time.monotonic())
        if spent:
            log.warning("bounce mail from %s refused: %s", session.peer, spent)
            return spent
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(  # noqa: N802 (aiosmtpd's hook names)
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if not verp.is_bounce_address(address, self.address, self.secret):
            return "550 5.1.1 No such user here: this server takes bounces for outbox only"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        raw = envelope.original_content or b""
        client = admission.client_of(session.peer)
        if spent := self.admission.spend(client, len(raw), time.monotonic()):
            log.warning("bounce mail from %s not stored: %s", session.peer, spent)
            return spent
        loop = asyncio.get_running_loop()
        try:
            pk, new = await loop.run_in_executor(None, self._save, raw, envelope)
        except Exception:
            log.exception("a bounce mail could not be stored; the sender will retry")
            return "451 4.3.0 Could not store the mail now; try again later"
        if new:
            await loop.run_in_executor(None, self._process, pk)
        return f"250 2.0.0 Stored as bounce mail {pk}"

    def _save(self, raw: bytes, envelope: Envelope) -> tuple[int, bool]:
        with self.app.app_context():
            null = str(envelope.mail_from or "").strip("<>")  # a bounce comes from <>
            return store.save(raw, "smtp", null, envelope.rcpt_tos)

    def _process(self, pk: int) -> None:
        with self.app.app_context():
            store.process_safely(pk)


def split_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as its parts; click.BadParameter if it is not."""
    host, colon, port = value.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not HOST:PORT, such as 127.0.0.1:2525")
    return host, int(port)


class BounceController(Controller):
    def factory(self) -> SMTP:
        return admission.AdmittedSMTP(self.handler, **self.SMTP_kwargs)


def listening(app: Flask, host: str, port: int) -> Controller:
    """The server, listening on host:port from its return; stop() ends it."""
    limit = app.config["BOUNCE_MAX_BYTES"]
    controller = BounceController(Handler(app), hostname=host, port=port, data_size_limit=limit)
    try:
        controller.start()
    except BaseException:
        controller.loop.close()  # aiosmtpd leaves the loop of a server that never started
        raise
    return controller


@click.command("bounces")
@click.option("--listen", metavar="HOST:PORT", required=True,
              help="Where to take bounce mails over SMTP: 127.0.0.1:2525.")  # fmt: skip
def bounces_command(listen: str) -> None:
    """Take bounce mails over SMTP for OUTBOX_BOUNCE_ADDRESS and its VERP forms until stopped.

    Runs until SIGTERM or SIGINT; first reads any mail stored but left unread by a
    stopped one.
    """
    host, port = split_listen(listen)
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    if not app.config.get("BOUNCE_ADDRESS"):
        raise click.UsageError("set OUTBOX_BOUNCE_ADDRESS first: the address bounces come to")
    try:
        admission.open_files_for(admission.bounce_limits(app.config))
    except ValueError as exc:
        raise click.UsageError(f"OUTBOX_BOUNCE_MAX_CONNECTIONS: {exc}") from None
    waiting = store.process_waiting()  # left unread by a process that stopped in between
    if waiting:
        click.echo(f"processed {waiting} bounce mails stored earlier")
    try:
        controller = listening(app, host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    click.echo(f"taking bounces for {app.config['BOUNCE_ADDRESS']} on {host}:{port}")
    try:
        stop.wait()
    finally:
        controller.stop()
    click.echo("stopped")
