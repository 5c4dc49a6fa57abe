"""`outbox smtpd`: run the SMTP submission server (outbox.submission.server) until stopped."""

import logging
import signal
import threading

import click
from flask import current_app

from .. import logs
from ..bounces.inbound import split_listen
from . import server, tls

log = logging.getLogger("outbox.smtpd")
STOP_WITHIN = 20.0  # seconds a stop waits for mails under way; the unit allows 30


@click.command("smtpd")
@click.option("--listen", metavar="HOST:PORT", default="127.0.0.1:587", show_default=True,
              help="Where to take mail: the submission port (RFC 6409); a port under 1024 "
              "needs root or CAP_NET_BIND_SERVICE.")  # fmt: skip
@click.option("--timeout", type=click.FloatRange(min=1), default=server.IDLE_TIMEOUT,
              show_default=True, help="Seconds a client may stay silent before it is "
              "disconnected.")  # fmt: skip
def smtpd_command(listen: str, timeout: float) -> None:
    """Take mail over SMTP (STARTTLS, AUTH with an API token) and queue it until stopped.

    The user name is the API token's name, the password the token; the token needs the
    send scope. AUTH is offered only after STARTTLS (OUTBOX_SMTPD_TLS_CERT and
    OUTBOX_SMTPD_TLS_KEY) unless OUTBOX_SMTPD_ALLOW_PLAINTEXT_AUTH=true.
    """
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    logs.setup(app.config["LOG_FORMAT"])
    # aiosmtpd logs every command at INFO (and a deprecation at each AUTH): the
    # server's own lines say what matters, with the peer, and never a token.
    logging.getLogger("mail.log").setLevel(logging.ERROR)
    host, port = split_listen(listen)
    try:
        context = tls.server_context(app.config)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    plaintext = app.config["SMTPD_ALLOW_PLAINTEXT_AUTH"]
    if context is None and not plaintext:
        raise click.UsageError(
            "set OUTBOX_SMTPD_TLS_CERT and OUTBOX_SMTPD_TLS_KEY so that clients can AUTH "
            "over STARTTLS, or OUTBOX_SMTPD_ALLOW_PLAINTEXT_AUTH=true on a loopback address"
        )
    if plaintext:
        log.warning("smtpd: AUTH is allowed without TLS (OUTBOX_SMTPD_ALLOW_PLAINTEXT_AUTH): "
                    "tokens cross the network readable; keep %s to loopback", host)  # fmt: skip
    try:
        controller = server.listening(app, host, port, context, timeout)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    starttls = "with STARTTLS" if context else "without TLS"
    click.echo(f"taking mail on {host}:{port} {starttls}", err=True)
    try:
        stop.wait()
    finally:
        server.stop(controller, STOP_WITHIN)
    click.echo("stopped", err=True)
