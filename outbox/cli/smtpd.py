"""`outbox smtpd`: run the SMTP submission server (outbox.submission.server) until stopped."""

import asyncio
import logging
import signal
import ssl

import click
from flask import Flask, current_app

from outbox.capabilities.bounces.inbound import split_listen
from outbox.capabilities.submission import server, tls
from outbox.core import logs
from outbox.smtp import admission

log = logging.getLogger("outbox.smtpd")
STOPS = {signal.SIGINT, signal.SIGTERM}
STOP_WITHIN = 20.0  # seconds a stop waits for mails under way; the unit allows 30


@click.command("smtpd")
@click.option("--listen", metavar="HOST:PORT", default="127.0.0.1:587", show_default=True,
              help="Where to take mail: the submission port (RFC 6409); a port under 1024 "
              "needs root or CAP_NET_BIND_SERVICE.")  # fmt: skip
@click.option("--listen-tls", metavar="HOST:PORT", default=None,
              help="Also take mail with TLS from the first byte (implicit TLS, RFC 8314), "
              "usually on port 465, with the same certificate.")  # fmt: skip
@click.option("--timeout", type=click.FloatRange(min=1), default=server.IDLE_TIMEOUT,
              show_default=True, help="Seconds a client may stay silent before it is "
              "disconnected.")  # fmt: skip
def smtpd_command(listen: str, listen_tls: str | None, timeout: float) -> None:
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
    host, port = split_listen(listen)
    context = checked_tls(app, host)
    implicit = split_listen(listen_tls) if listen_tls else None
    if implicit and context is None:
        raise click.UsageError("--listen-tls needs OUTBOX_SMTPD_TLS_CERT and OUTBOX_SMTPD_TLS_KEY")
    try:
        admission.open_files_for(admission.smtpd_limits(app.config))
    except ValueError as exc:
        raise click.UsageError(f"OUTBOX_SMTPD_MAX_CONNECTIONS: {exc}") from None
    try:
        serve(app, (host, port), context, timeout, implicit)
    except OSError as exc:
        raise click.ClickException(f"cannot listen: {exc}") from None


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


def serve(
    app: Flask, where: tuple[str, int], context: ssl.SSLContext | None, timeout: float,
    implicit: tuple[str, int] | None = None,
) -> None:  # fmt: skip
    """Serve in this thread until SIGTERM or SIGINT, then let the mails under way finish;
    on implicit as well, with TLS from the first byte (context), if given.

    A stop closes the port first, then waits up to STOP_WITHIN for every DATA under way
    to get its answer: a mail cut off before its 250 is the client's to send again.
    """
    loop = asyncio.new_event_loop()
    handler = server.Handler(app)
    settings = server.options(app, context, timeout)
    tls_settings = server.options(app, context, timeout, implicit=True)

    def protocol() -> server.Submission:
        return server.Submission(handler, loop=loop, **settings)

    def tls_protocol() -> server.Submission:
        return server.Submission(handler, loop=loop, **tls_settings)

    try:
        listening = [loop.run_until_complete(loop.create_server(protocol, *where))]
        starttls = "with STARTTLS" if context else "without TLS"
        click.echo(f"taking mail on {where[0]}:{where[1]} {starttls}", err=True)
        if implicit is not None:
            made = loop.create_server(tls_protocol, *implicit, ssl=context)
            listening.append(loop.run_until_complete(made))
            click.echo(f"taking mail on {implicit[0]}:{implicit[1]} with TLS", err=True)
        stopping = asyncio.Event()
        for sig in STOPS:
            loop.add_signal_handler(sig, stopping.set)
        loop.run_until_complete(_until_stopped(listening, stopping, handler))
        loop.run_until_complete(_end_connections())
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    click.echo("stopped", err=True)


async def _until_stopped(
    listening: list[asyncio.Server], stopping: asyncio.Event, handler: server.Handler
) -> None:
    await stopping.wait()
    for each in listening:
        each.close()
    deadline = asyncio.get_running_loop().time() + STOP_WITHIN
    while handler.in_flight and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)


async def _end_connections() -> None:
    """Cancel the sessions still open (between mails, or past STOP_WITHIN) and wait for them."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
