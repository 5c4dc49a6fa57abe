"""`outbox smtpd`: run the SMTP submission server (outbox.capabilities.submission.server)."""

import logging
import ssl

import click
from flask import Flask, current_app

from outbox.capabilities.submission import server, tls
from outbox.cli import listen
from outbox.core import logs
from outbox.smtp import server as smtp_server

log = logging.getLogger("outbox.smtpd")


@click.command("smtpd")
@click.option("--listen", "where", metavar="HOST:PORT", default="127.0.0.1:587", show_default=True,
              help="Where to take mail: the submission port (RFC 6409); a port under 1024 "
              "needs root or CAP_NET_BIND_SERVICE.")  # fmt: skip
@click.option("--listen-tls", "where_tls", metavar="HOST:PORT", default=None,
              help="Also take mail with TLS from the first byte (implicit TLS, RFC 8314), "
              "usually on port 465, with the same certificate.")  # fmt: skip
@click.option("--timeout", type=click.FloatRange(min=1), default=server.IDLE_TIMEOUT,
              show_default=True, help="Seconds a client may stay silent before it is "
              "disconnected.")  # fmt: skip
def smtpd_command(where: str, where_tls: str | None, timeout: float) -> None:
    """Take mail over SMTP (STARTTLS or implicit TLS, AUTH with an API token) and queue it
    until stopped.

    The user name is the API token's name, the password the token; the token needs the
    send scope. AUTH is offered only after STARTTLS (OUTBOX_SMTPD_TLS_CERT and
    OUTBOX_SMTPD_TLS_KEY) unless OUTBOX_SMTPD_ALLOW_PLAINTEXT_AUTH=true. Mail is queued
    as it came. SIGTERM or SIGINT stops it, letting the mails under way get their answer
    first.
    """
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    logs.setup(app.config["LOG_FORMAT"])
    # aiosmtpd logs every command at INFO (and a deprecation at each AUTH): the
    # server's own lines say what matters, with the peer, and never a token.
    logging.getLogger("mail.log").setLevel(logging.ERROR)
    host, port = listen.address(where)
    context = checked_tls(app, host)
    implicit = listen.address(where_tls) if where_tls else None
    if implicit and context is None:
        raise click.UsageError("--listen-tls needs OUTBOX_SMTPD_TLS_CERT and OUTBOX_SMTPD_TLS_KEY")
    try:
        submission = smtp_server.Server(server.Submission, server.Handler(app))
    except ValueError as exc:
        raise click.UsageError(f"OUTBOX_SMTPD_MAX_CONNECTIONS: {exc}") from None
    with submission:
        try:
            submission.listen(host, port, server.options(app, context, timeout))
            starttls = "with STARTTLS" if context else "without TLS"
            click.echo(f"taking mail on {host}:{port} {starttls}", err=True)
            if implicit is not None:
                settings = server.options(app, context, timeout, implicit=True)
                submission.listen(*implicit, settings, tls=context)
                click.echo(f"taking mail on {implicit[0]}:{implicit[1]} with TLS", err=True)
        except OSError as exc:
            raise click.ClickException(f"cannot listen: {exc}") from None
        submission.run()  # a stop lets the mails under way get their answer first
    click.echo("stopped", err=True)


def checked_tls(app: Flask, host: str) -> ssl.SSLContext | None:
    """The STARTTLS context, or a usage error saying which setting is missing or wrong."""
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
    return context
